"""Where the layers run: tensor parallel, pipeline parallel and partial offload to the host.

The cost model (`sim.cost.roofline.CostModel`) prices one iteration as a roofline on one device. This module
says how a deployment splits that work over devices, as a `Placement`: a sequence of device
*parts* one micro-batch passes through in order (pipeline stages, or the host's layers then the
GPU's), each with its share of the layers, whether it holds the LM head, and its effective rates;
plus the communication a pass pays (all-reduces, activation transfers). `CostModel` turns a
Placement into seconds; this module holds the arithmetic of the split and of the transfers.

Tensor parallel (Megatron-LM style, Shoeybi et al. 2019, arXiv 1909.08053), `tp = N`:
  every weight matrix, the attention heads and the FFN are split N ways, so each device streams
  1/N of the weights and does 1/N of the FLOPs; the KV cache is split by KV heads, each device
  holding max(1, K // N) of the K KV heads (vLLM replicates KV heads when N > K:
  vllm/model_executor/layers/linear.py QKVParallelLinear). A group of N devices with per-device
  rates r is priced as one part with rates N x r and KV bytes x (N x max(1, K // N) / K).
  Each transformer layer ends two row-parallel matmuls (attention output, MLP down projection) with
  an all-reduce of the layer's activations, T x hidden x 2 bytes (bf16) for T tokens, priced as a
  ring all-reduce (`ring_allreduce_s`, Patarasuk & Yuan 2009; NCCL's ring algorithm):

      t_allreduce = 2 (N - 1) / N x bytes / interconnect_bandwidth + 2 (N - 1) x interconnect_latency

  2(N-1) steps (reduce-scatter then all-gather), each moving bytes / N per device. The profile's
  `interconnect_bandwidth_gb_per_s` is per device and per direction, `interconnect_latency_us` the
  latency of one collective step. The all-reduces sit on the critical path (not overlapped with
  compute), as in Megatron-LM and vLLM's decode.
  That ring is NCCL's algorithm, and the one engines without a custom all-reduce run (llama.cpp's
  row split prices it so). vLLM, SGLang and TensorRT-LLM instead run their own all-reduce kernels on
  the small messages of decode and pick the algorithm by message size (`AllReducePolicy`,
  `allreduce_s`; engine preset field `allreduce_max_kib`: one-shot and custom limits per TP size, priced
  so only when the engine's `allreduce_algorithms` is on: off in the presets, see docs/cost-model.md):

      one-shot (every rank reads the N - 1 peers' whole buffers over NVLink and reduces locally):
          t = alpha + (N - 1) x bytes / link_bandwidth
      two-shot (reduce-scatter then all-gather through peer buffers):
          t = 2 alpha + 2 (N - 1) / N x bytes / link_bandwidth
      beyond the custom kernels' buffer, NCCL's ring as above.

  alpha, one shot's barrier and peer exchange, is the same collective step the ring's steps cost: the
  kernel family's fitted `interconnect_latency_us` (`Efficiency.interconnect_latency_us`, fitted to the
  public TP rows; the profile's own without a fit). A step of the engine's all-reduce path is a launch,
  a barrier across the ranks and a synchronisation whichever algorithm moves the data, so a one-shot
  kernel costs one such step and a two-shot two, where the ring costs 2 (N - 1). TensorRT-LLM's offline
  rows, large batches on the ring, fit 14-19 us per step, more than a bare NVLink hop; priced at the
  profile's link latency instead (5 us) the one-shot kernels made TensorRT-LLM 1.0's H100 TP2 offline
  rows fast and the kernel fit's held-out p90 worse (docs/cost-model.md). Without a custom all-reduce
  (llama.cpp; a deployment over PCIe, where vLLM
  disables its kernels above 2 GPUs and TensorRT-LLM falls back to NCCL; AMD parts, whose ROCm
  kernels are not modelled) every message runs the ring.
  The bandwidth in the all-reduce is the bus bandwidth a ring reaches over that link
  (`allreduce_bus_bandwidth_gb_per_s`, NCCL all_reduce_perf's busbw), the link rate when the profile
  gives none. Over PCIe the two differ by 2x: the GPUs' flows cross the host's PCIe switches,
  root complexes and the link between sockets, and "on PCI systems, the performance you get is
  usually determined by the bandwidth your CPU and memory can deliver" (NCCL maintainer,
  NVIDIA/nccl#1639: 8 RTX 5090s on PCIe 5.0 x16, 64 GB/s per direction, reached a busbw of
  28 GB/s over 8 GPUs and 35 GB/s over 4). A point-to-point pipeline send keeps the link rate.

Pipeline parallel, `pp = N`: the layers are split into N consecutive stages (`stage_layer_counts`,
  as even as possible, the remainder to the first stages), the LM head on the last stage.
  Between stages the micro-batch's hidden states (T_b x hidden x 2 bytes) cross the interconnect:
  one point-to-point transfer per stage boundary, bytes / bandwidth + latency.
  - One batch split into m micro-batches, run once (GPipe, Huang et al. 2019, arXiv 1811.06965):
    with equal stage times tau, the pass takes (m + N - 1) tau and each stage is idle a fraction
    (N - 1) / (m + N - 1) of it — the pipeline bubble (`gpipe_time_s`, `pipeline_bubble_fraction`).
  - Serving (what the simulator's iterations are): the engine keeps up to N micro-batches in flight
    (vLLM runs `pp` virtual engines, each with its own batch), and a micro-batch re-enters stage 1
    as soon as it leaves stage N. The batch of an iteration is split into m = min(N, sequences)
    micro-batches of equal shares (T/m tokens, KV reads/m, ...); one iteration — every sequence
    advancing one token — lasts the latency of one micro-batch through the pipeline:

        iteration_s = max( sum over stages of stage_s(batch / m) + (N - 1) x transfer_s(batch / m),
                           m x max over stages of stage_s(batch / m) )

    The first term is the latency of a micro-batch's round trip (each re-enters stage 1 when it
    leaves stage N); the second the throughput bound: every stage works on all m micro-batches
    per iteration, and the slowest (usually the last, with the LM head) can take longer than the
    round trip. With balanced stages and m = N the two agree up to the transfers: no bubble
    remains in the steady state. Limits: sends are taken to overlap the sender's next compute;
    a single long prefill (m = 1) gets no pipelining, as in vLLM, which pipelines across
    requests, not within one (chunked-prefill pipelining within a prompt is not modelled).
    Weights are read once per micro-batch per stage, so a memory-bound decode gains nothing from PP
    but memory capacity — which is what PP is used for. A decode run's sum of these maxima is still
    exact (`sim.cost.decode_runs._sum_pipeline_steps`: piecewise-linear between line crossings).

Partial offload (llama.cpp `--n-gpu-layers`), `gpu_layers = g`: llama.cpp counts n_layer + 1
  slots, the output layer being the first to go on the GPU: `i_gpu_start = max(n_layer + 1 - g, 0)`,
  repeating layers i_gpu_start .. n_layer - 1 and (for g >= 1) the output layer on the GPU, the rest
  and the input embedding on the host (src/llama-model.cpp, `load_tensors`). Each layer's KV cache
  lives with its layer. An iteration runs the host's layers at the host profile's bandwidth and
  FLOP/s, then the GPU's (the two do not overlap: the layers are sequential), and the hidden
  states cross the host link (`host_bandwidth_gb_per_s` of the GPU profile) once when both hold
  layers: T x hidden x 4 bytes (ggml keeps activations in f32) / bandwidth + HOST_LINK_LATENCY_S.
  Op offload: for a batch of at least OP_OFFLOAD_MIN_TOKENS tokens, ggml runs the matmuls of
  host-resident weights on the GPU, copying the weights over the link first
  (ggml/src/ggml-cuda/ggml-cuda.cu `ggml_backend_cuda_device_offload_op`: batch >= 32; the
  scheduler copies a split's inputs, then computes it). Attention stays on the host, where its KV
  cache is. So for T >= 32 the host layers cost

      uploads x host layer bytes / link bandwidth + matmul FLOPs / GPU FLOP/s
      + max(attention FLOPs / host FLOP/s, KV bytes / host bandwidth)

  with one upload per micro-batch of `ubatch_tokens` (llama.cpp -ub, default 512):
  uploads = ceil(T / ubatch). This is what makes prompt processing with a partly offloaded model
  run at hundreds of tokens/s instead of the CPU's few.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from sim.errors import ConfigError

if TYPE_CHECKING:
    from sim.catalog.engine_config import EngineConfig
    from sim.catalog.hardware import HardwareProfile
    from sim.catalog.models import ModelSpec
    from sim.catalog.quant import QuantFormat
    from sim.cost.params import CostParams

# Hidden states between devices in bf16 (vLLM, Megatron-LM, TensorRT-LLM activations).
DEVICE_ACTIVATION_BYTES = 2
# llama.cpp's ggml graphs keep hidden states in f32 (the tensors passed between backends).
HOST_ACTIVATION_BYTES = 4
# One small host<->device copy over PCIe: a cudaMemcpyAsync plus its synchronisation, ~10 us
# (engineering estimate pending calibration; PCIe round trips are 1-2 us, the driver adds the rest).
HOST_LINK_LATENCY_S = 10e-6
# Megatron-style TP: an all-reduce after the attention output projection and after the MLP.
ALLREDUCES_PER_LAYER = 2
# ggml backends offload an op on host weights to the GPU from this batch size (ggml-cuda.cu, ggml-metal).
OP_OFFLOAD_MIN_TOKENS = 32
# llama.cpp's physical batch (-ub / n_ubatch default 512, common/common.h): the unit of one upload.
LLAMA_CPP_UBATCH_TOKENS = 512


def ring_allreduce_s(message_bytes: float, devices: int, bandwidth_bytes_per_s: float, latency_s: float) -> float:
    """Seconds of one ring all-reduce of `message_bytes` over `devices` devices:

        2 (N - 1) / N x bytes / bandwidth + 2 (N - 1) x latency

    (reduce-scatter and all-gather, N - 1 steps each, every step moving bytes / N per device over
    a link of `bandwidth_bytes_per_s` per direction). 0 for one device.
    """
    if devices <= 1:
        return 0.0
    steps = 2 * (devices - 1)
    return steps / devices * message_bytes / bandwidth_bytes_per_s + steps * latency_s


ONESHOT, TWOSHOT, RING = "oneshot", "twoshot", "ring"


@dataclass(frozen=True)
class AllReducePolicy:
    """Which all-reduce algorithm an engine runs on a message of `bytes` over its TP group.

    `oneshot_max_bytes`: messages up to it run one-shot; `custom_max_bytes`: up to it two-shot (the
    engine's custom all-reduce buffer); beyond, NCCL's ring. Both 0 = no custom all-reduce (every
    message on NCCL's ring). Built per TP size from the engine preset (`for_engine`)."""

    oneshot_max_bytes: float = 0.0
    custom_max_bytes: float = 0.0

    @property
    def custom(self) -> bool:
        return self.custom_max_bytes > 0 or self.oneshot_max_bytes > 0

    def algorithm(self, message_bytes: float) -> str:
        """The algorithm a message of `message_bytes` runs (one message; `allreduce_s` is vectorised)."""
        if message_bytes <= self.oneshot_max_bytes:
            return ONESHOT
        if message_bytes <= self.custom_max_bytes:
            return TWOSHOT
        return RING

    @classmethod
    def for_engine(cls, engine: "EngineConfig | None", tp: int, hw: "HardwareProfile | None" = None) -> "AllReducePolicy":
        """The engine preset's thresholds for a TP group of `tp` on `hw` (KiB in the preset; a TP size the
        preset does not list runs NCCL, as vLLM's custom all-reduce supports only world sizes 2, 4, 6, 8).
        Datacenter Blackwell (`generation: blackwell`) takes the `*_blackwell` tables where the preset has
        them. The custom kernels need an NVIDIA peer link faster than PCIe (NVLink: the profile's
        interconnect above its host link; AMD's ROCm kernels are not modelled); over PCIe every engine falls back to NCCL (vLLM disables its
        custom all-reduce above 2 GPUs without full NVLink and consumer cards lack P2P; TensorRT-LLM's
        ifFallbackToNCCL checks NVLink)."""
        if engine is None or tp <= 1 or not engine.allreduce_algorithms:
            return cls()
        if hw is not None and (hw.vendor != "NVIDIA"
                               or not (hw.interconnect_bandwidth_gb_per_s or 0) > (hw.host_bandwidth_gb_per_s or 0)):
            return cls()
        table = engine.allreduce_max_kib or {}
        blackwell = hw is not None and hw.generation == "blackwell"
        ones = (blackwell and table.get("oneshot_blackwell")) or table.get("oneshot") or {}
        customs = (blackwell and table.get("custom_blackwell")) or table.get("custom") or {}
        one, custom = ones.get(tp, 0.0), customs.get(tp, 0.0)
        return cls(oneshot_max_bytes=one * 1024.0, custom_max_bytes=max(custom, one) * 1024.0)


def allreduce_s(message_bytes, devices: int, link_bandwidth_bytes_per_s: float, ring_bandwidth_bytes_per_s: float,
                hop_latency_s: float, ring_step_latency_s: float, policy: AllReducePolicy | None = None):
    """Seconds of one all-reduce of `message_bytes` (scalar or numpy array) over `devices` devices by the
    algorithm `policy` picks for that size (module docstring):

        one-shot: alpha + (N - 1) x bytes / link_bw
        two-shot: 2 alpha + 2 (N - 1) / N x bytes / link_bw
        ring:     2 (N - 1) / N x bytes / ring_bw + 2 (N - 1) x step

    alpha = `hop_latency_s` (one custom kernel's barrier and peer exchange), step = `ring_step_latency_s`.
    With no policy (or one without a custom all-reduce) every size runs the ring. 0 for one device."""
    import numpy as np

    if devices <= 1:
        return 0.0 * message_bytes
    n = devices
    b = np.asarray(message_bytes, dtype=float)
    ring = ring_allreduce_s(b, n, ring_bandwidth_bytes_per_s, ring_step_latency_s)
    if policy is None or not policy.custom:
        out = ring
    else:
        one = hop_latency_s + (n - 1) * b / link_bandwidth_bytes_per_s
        two = 2 * hop_latency_s + 2 * (n - 1) / n * b / link_bandwidth_bytes_per_s
        out = np.where(b <= policy.oneshot_max_bytes, one, np.where(b <= policy.custom_max_bytes, two, ring))
    return float(out) if np.ndim(out) == 0 else out


def kv_heads_per_device(n_kv_heads: int, tp: int) -> int:
    """KV heads each tensor-parallel rank caches: K / N, or 1 (replicated) when N > K (vLLM)."""
    return max(1, n_kv_heads // tp)


def kv_tp_share(model: "ModelSpec", tp: int) -> float:
    """Share of a token's KV bytes one of tp ranks caches: max(1, K // tp) / K (`kv_heads_per_device`); where the
    full-attention layers have KV heads of their own (Gemma 4 31B: 4 beside the sliding layers' 16, so TP8
    replicates them), each layer type's share weighted by its bytes per token."""
    share = kv_heads_per_device(model.n_cache_heads, tp) / model.n_cache_heads  # MLA: 1 cache head, replicated
    if not model.has_global_shape:
        return share
    swa = model.n_sliding_layers * model.cache_elements_per_layer_token
    full, kg = model.n_full_attention_layers * model.global_cache_elements, model.global_n_kv_heads or model.n_kv_heads
    return (swa * share + full * kv_heads_per_device(kg, tp) / kg) / (swa + full)


def stage_layer_counts(n_layers: int, pp: int) -> tuple[int, ...]:
    """Layers per pipeline stage: as even as possible, the first `n_layers % pp` stages one more."""
    if pp > n_layers:
        raise ConfigError(f"pp={pp} exceeds the model's {n_layers} layers", field="pp")
    base, extra = divmod(n_layers, pp)
    return tuple(base + (1 if s < extra else 0) for s in range(pp))


def pipeline_bubble_fraction(stages: int, microbatches: int) -> float:
    """Share of a GPipe pass each stage is idle: (N - 1) / (m + N - 1) for N stages, m micro-batches."""
    return (stages - 1) / (microbatches + stages - 1)


def gpipe_time_s(stage_s: float, stages: int, microbatches: int, transfer_s: float = 0.0) -> float:
    """One batch of m micro-batches through N equal stages of `stage_s` each (per micro-batch):

        (m + N - 1) x stage_s + (N - 1) x transfer_s

    The first micro-batch needs N stage times and N - 1 transfers to leave the pipeline, each of the
    other m - 1 one more stage time (transfers overlap the next micro-batch's compute)."""
    return (microbatches + stages - 1) * stage_s + (stages - 1) * transfer_s


def offload_split(n_layers: int, gpu_layers: int) -> tuple[int, bool]:
    """(repeating layers on the GPU, output layer on the GPU) for llama.cpp's `-ngl gpu_layers`.

    llama.cpp offloads from the back of n_layers + 1 slots, the output layer first:
    i_gpu_start = max(n_layers + 1 - g, 0) (src/llama-model.cpp `load_tensors`). So g = 0 is all
    host, g = 1 only the output layer, g >= n_layers + 1 everything (users pass -ngl 99 or 999).
    """
    if gpu_layers < 0:
        raise ConfigError(f"must be >= 0, got {gpu_layers}", field="gpu_layers")
    g = min(gpu_layers, n_layers + 1)
    return max(g - 1, 0), g >= 1


@dataclass(frozen=True)
class ParallelConfig:
    """Tensor- and pipeline-parallel degrees and the interconnect that joins the devices."""

    tp: int = 1
    pp: int = 1
    interconnect_bandwidth_bytes_per_s: float = math.inf
    interconnect_latency_s: float = 0.0
    # bus bandwidth of a ring all-reduce over the interconnect; None = the link rate above
    allreduce_bandwidth_bytes_per_s: float | None = None
    # MoE: routed experts placed whole on the tp ranks (`expert_parallel_imbalance`) instead of split
    expert_parallel: bool = False
    # the engine's all-reduce algorithm by message size (None: NCCL's ring for every size, at
    # `interconnect_latency_s` per step), the ring's steps still at that latency beyond the custom kernels
    allreduce_policy: AllReducePolicy | None = None
    # one custom all-reduce kernel's barrier-and-exchange latency; None = `interconnect_latency_s`, the
    # collective step (what `for_profile` builds: the family's fitted step, module docstring)
    custom_hop_latency_s: float | None = None
    # pipeline stages overlap up to pp micro-batches of an iteration (vLLM / TensorRT-LLM / SGLang); False:
    # every pass runs the stages in turn (llama.cpp's layer split: `EngineConfig.pipeline_overlap` 'none')
    microbatch_overlap: bool = True
    # host seconds per step of the engine's multi-process executor (EngineConfig.tp_step_overhead_ms; vLLM V1's
    # MultiprocExecutor broadcasts each step's SchedulerOutput to the tp x pp worker processes through a
    # shared-memory queue and reads the ModelRunnerOutput back, with async scheduling off nothing overlaps it):
    # added to every iteration of a multi-device placement (`Placement.extra_overhead_s`); 0 = off
    executor_step_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("tp", "pp"):
            v = getattr(self, name)
            if not (isinstance(v, int) and v >= 1):
                raise ConfigError(f"must be an integer >= 1, got {v}", field=name)
        if not self.interconnect_bandwidth_bytes_per_s > 0 or self.interconnect_latency_s < 0:
            raise ConfigError("interconnect bandwidth must be > 0 and latency >= 0", field="interconnect")
        if self.allreduce_bandwidth_bytes_per_s is not None and not self.allreduce_bandwidth_bytes_per_s > 0:
            raise ConfigError("all-reduce bus bandwidth must be > 0", field="interconnect")
        if not (math.isfinite(self.executor_step_s) and self.executor_step_s >= 0):
            raise ConfigError(f"must be >= 0 and finite, got {self.executor_step_s}", field="tp_step_overhead_ms")

    @property
    def devices(self) -> int:
        return self.tp * self.pp

    @classmethod
    def for_profile(cls, hw: "HardwareProfile", tp: int = 1, pp: int = 1,
                    latency_us: float | None = None, expert_parallel: bool = False,
                    engine: "EngineConfig | None" = None) -> "ParallelConfig":
        """The degrees with `hw`'s interconnect; a multi-device split needs the profile to state one.
        `latency_us` replaces the profile's collective step latency (an engine family's all-reduce,
        fitted to public TP measurements: `Efficiency.interconnect_latency_us`). `engine`'s custom
        all-reduce thresholds (`AllReducePolicy.for_engine`) pick the algorithm per message size; a shot of
        the custom kernels costs the same step latency as a step of NCCL's ring (module docstring)."""
        if tp * pp > 1 and hw.interconnect_bandwidth_gb_per_s is None:
            raise ConfigError(
                f"{hw.name} has no interconnect_bandwidth_gb_per_s; tp/pp > 1 needs one", field="tp")
        bw = hw.interconnect_bandwidth_gb_per_s
        ar = hw.allreduce_bus_bandwidth_gb_per_s
        policy = AllReducePolicy.for_engine(engine, tp, hw)
        custom = policy.custom  # an engine without a custom all-reduce: the ring alone
        return cls(tp=tp, pp=pp,
                   interconnect_bandwidth_bytes_per_s=bw * 1e9 if bw is not None else math.inf,
                   interconnect_latency_s=(hw.interconnect_latency_us if latency_us is None else latency_us) / 1e6,
                   allreduce_bandwidth_bytes_per_s=ar * 1e9 if ar is not None else None,
                   expert_parallel=expert_parallel,
                   allreduce_policy=policy if custom else None,
                   microbatch_overlap=engine is None or engine.pipeline_overlap == "microbatch",
                   executor_step_s=(engine.tp_step_overhead_ms / 1e3 if engine is not None and tp * pp > 1 else 0.0))


def expert_parallel_imbalance(touched, n_experts: int, ranks: int):
    """Expected (most-loaded rank's touched experts) / (mean per rank) when `touched` distinct routed experts
    of `n_experts` are read by `ranks` devices holding n_experts / ranks whole experts each (expert
    parallelism with tensor-parallel attention: every rank sees every token, runs the experts it owns,
    and the step waits for the rank with the most; the combine is the all-reduce TP pays anyway).

    The count on one rank is hypergeometric: mean mu = touched / N, variance
    sigma^2 = touched (1/N)(1 - 1/N)(E - touched)/(E - 1); the expected maximum of N such counts is taken
    as mu + sigma sqrt(2 ln N) (the Gaussian extreme-value bound), capped at what one rank holds,
    min(touched, E / N). Decode of one sequence of DeepSeek-V3 on 8 ranks (8 of 256 experts): 2.88, the
    busiest rank reading about 3 experts where TP's split reads 1 expert's worth; -> 1 as a large batch
    touches every expert. Scalars or numpy arrays."""
    import numpy as np

    t = np.asarray(touched, dtype=float)
    n, e = float(ranks), float(n_experts)
    mu = t / n
    var = t * (1 / n) * (1 - 1 / n) * np.maximum(e - t, 0.0) / max(e - 1, 1.0)
    worst = np.minimum(mu + np.sqrt(var) * math.sqrt(2 * math.log(n)), np.minimum(t, e / n))
    factor = np.where(mu > 0, worst / np.where(mu > 0, mu, 1.0), 1.0)
    return float(factor) if np.ndim(factor) == 0 else factor


@dataclass(frozen=True)
class OffloadConfig:
    """Partial offload: `gpu_layers` in llama.cpp's `-ngl` sense (see `offload_split`), the host's
    effective cost parameters, and the host<->device link."""

    gpu_layers: int
    host_params: "CostParams"
    link_bandwidth_bytes_per_s: float
    link_latency_s: float = HOST_LINK_LATENCY_S
    host_iteration_overhead_s: float = 0.0  # the host device's own floor per iteration (no engine share)
    op_offload_min_tokens: float = OP_OFFLOAD_MIN_TOKENS  # math.inf turns op offload off (--no-op-offload)
    ubatch_tokens: int = LLAMA_CPP_UBATCH_TOKENS

    @classmethod
    def for_profiles(
        cls,
        gpu: "HardwareProfile",
        host: "HardwareProfile",
        quant: "str | QuantFormat",
        gpu_layers: int,
        engine: "EngineConfig | None" = None,
    ) -> "OffloadConfig":
        """Host rates from the host profile (and the engine's efficiency scale), link from the GPU's
        `host_bandwidth_gb_per_s` (a profile without one — unified memory — cannot offload)."""
        from sim.cost.params import CostParams

        if gpu.host_bandwidth_gb_per_s is None:
            raise ConfigError(f"{gpu.name} has no host_bandwidth_gb_per_s (unified memory): nothing to offload to",
                              field="gpu_layers")
        return cls(gpu_layers=gpu_layers, host_params=CostParams.from_profile(host, quant, engine),
                   link_bandwidth_bytes_per_s=gpu.host_bandwidth_gb_per_s * 1e9,
                   host_iteration_overhead_s=host.iteration_overhead_ms / 1e3)


@dataclass(frozen=True)
class DevicePart:
    """One segment of a forward pass: a device (or a TP group priced as one) and its share.

    `layer_fraction` of the repeating layers (their weights, FLOPs, KV), the LM head when `head`,
    at the group's aggregate rates; `kv_factor` >= 1 multiplies its KV bytes when KV heads are
    replicated across TP ranks."""

    name: str
    layer_fraction: float
    head: bool
    bandwidth_bytes_per_s: float
    matmul_flops_per_s: float
    attention_flops_per_s: float
    kv_factor: float = 1.0
    # Hockney n_1/2 of the part's matmuls, rows (`CostParams.matmul_half_rows`, sim.cost.roofline): a TP
    # group or pipeline stage runs the device's own GEMM kernels on the same T rows, and the start-up is
    # weight-proportional (each device loads its 1/N of the weights once per tile pass), so pricing the
    # group as one device of N x the rates with the device's n_1/2 is exact. 0 for offload parts (host
    # and GPU of a partial offload keep the plain roofline, as before).
    matmul_half_rows: float = 0.0
    # ALU seconds per dequantized weight of the part's mat-vec kernels (`CostParams.matvec_s_per_weight`, sim.cost.roofline `weight_stream_s`;
    # a TP group's devices each dequantize 1/N of the weights: the device's value / N)
    matvec_s_per_weight: float = 0.0
    # op offload (host parts only): from `upload_min_tokens` tokens the weights' matmuls run on a
    # device of `upload_matmul_flops_per_s` after the weights cross a link of `upload_bandwidth_bytes_per_s`,
    # once per `upload_chunk_tokens` tokens
    upload_min_tokens: float = math.inf
    upload_bandwidth_bytes_per_s: float = math.inf
    upload_matmul_flops_per_s: float = math.inf
    upload_chunk_tokens: float = math.inf


@dataclass(frozen=True)
class Placement:
    """How one micro-batch's forward pass is spread: parts run in sequence, then

    pass_s = sum_p stage_p + comm_s_per_token x T_b + comm_s_per_pass
    stage_p = gemm_p + max(attention FLOPs_p, K/V_p),  gemm_p = max(matmul FLOPs_p, weight bytes_p)

(each part's kernel groups at their own roofline, one after the other: sim.cost.roofline)

    with up to `microbatches` micro-batches in flight (pp; the iteration is then the larger of the
    pass and m x the slowest part), and `extra_overhead_s` per iteration
    (the host's own per-iteration cost when it runs layers next to the GPU; on a tp x pp group, the engine's
    multi-process executor round trip, `ParallelConfig.executor_step_s`). The iteration and
    per-sequence overheads are those of `overhead_params` (the host's when it runs everything)."""

    parts: tuple[DevicePart, ...]
    microbatches: int = 1
    comm_s_per_token: float = 0.0
    comm_s_per_pass: float = 0.0
    extra_overhead_s: float = 0.0
    # TP all-reduces priced by algorithm (`TPAllReduce.seconds(tokens)`), added to the comm terms above
    allreduce: "TPAllReduce | None" = None
    overhead_params: "CostParams | None" = None  # whose iteration/per-sequence overheads apply (None: the GPU's)
    # the part of comm_s_per_token / comm_s_per_pass spent inside the layers (the TP all-reduces, not the
    # pipeline sends): the per-layer kernel floor bounds it with the layers' GEMMs (sim.cost.placed)
    layer_comm_s_per_token: float = 0.0
    layer_comm_s_per_pass: float = 0.0


@dataclass(frozen=True)
class TPAllReduce:
    """A pass's tensor-parallel all-reduces: `count` per pass, each of tokens x `bytes_per_token` bytes,
    priced by `allreduce_s` with the algorithm `policy` picks for that message size."""

    count: int
    devices: int
    bytes_per_token: float
    link_bandwidth_bytes_per_s: float
    ring_bandwidth_bytes_per_s: float
    hop_latency_s: float
    ring_step_latency_s: float
    policy: AllReducePolicy

    def seconds(self, tokens):
        """Seconds of the pass's all-reduces for `tokens` tokens (scalar or numpy array)."""
        return self.count * allreduce_s(tokens * self.bytes_per_token, self.devices, self.link_bandwidth_bytes_per_s,
                                        self.ring_bandwidth_bytes_per_s, self.hop_latency_s,
                                        self.ring_step_latency_s, self.policy)

    def terms(self, tokens):
        """(seconds without the step latency, steps) for `tokens`: seconds(tokens) = fixed + steps x
        ring_step_latency_s (the split the public fit uses to fit the family's step latency). A ring all-reduce
        is 2 (N - 1) steps, a one-shot 1 and a two-shot 2 shots of `hop_latency_s` each, counted in steps of
        `ring_step_latency_s` (1 per shot when the two are the same step, as `ParallelConfig.for_profile`
        builds them)."""
        import numpy as np

        b = np.asarray(tokens, dtype=float) * self.bytes_per_token
        shots = np.where(b <= self.policy.oneshot_max_bytes, 1.0, 2.0)
        per_shot = self.hop_latency_s / self.ring_step_latency_s if self.ring_step_latency_s > 0 else 0.0
        steps = self.count * np.where(b > self.policy.custom_max_bytes, 2.0 * (self.devices - 1), shots * per_shot)
        return self.seconds(tokens) - steps * self.ring_step_latency_s, steps


def tp_group_params(params: "CostParams", tp: int) -> "CostParams":
    """A tensor-parallel group of `tp` devices as one device: tp x the bandwidth, matmul and attention
    rates, the device's own GEMM start-up n_1/2 (`DevicePart.matmul_half_rows`), and no decode-attention
    slowdown (placements do not apply it: sim.cost.roofline module docstring). What `build_placement`
    gives each part, and what the public fit's replay prices a TP row with (calibrate/public_fit.py)."""
    return replace(params, bandwidth_bytes_per_s=params.bandwidth_bytes_per_s * tp,
                   matmul_flops_per_s=params.matmul_flops_per_s * tp,
                   attention_flops_per_s=params.attention_flops_per_s * tp, decode_attention_slowdown=1.0,
                   matvec_s_per_weight=params.matvec_s_per_weight / tp)


def build_placement(
    model: "ModelSpec",
    params: "CostParams",
    parallel: ParallelConfig | None = None,
    offload: OffloadConfig | None = None,
) -> Placement | None:
    """The Placement of a deployment, or None for one device holding everything (the fast path)."""
    tp = parallel.tp if parallel else 1
    pp = parallel.pp if parallel else 1
    if offload is not None:
        if tp > 1 or pp > 1:
            raise ConfigError("partial offload cannot be combined with tp or pp > 1", field="gpu_layers")
        return _offload_placement(model, params, offload)
    if tp == 1 and pp == 1:
        return None
    L, h = model.n_layers, model.hidden_size
    kv_factor = tp * kv_tp_share(model, tp)  # K/V bytes per rank over an even split (replicated heads)
    counts = stage_layer_counts(L, pp)
    group = tp_group_params(params, tp)
    parts = tuple(
        DevicePart(f"stage{s}", n / L, s == pp - 1, group.bandwidth_bytes_per_s,
                   group.matmul_flops_per_s, group.attention_flops_per_s, kv_factor,
                   matmul_half_rows=group.matmul_half_rows, matvec_s_per_weight=group.matvec_s_per_weight)
        for s, n in enumerate(counts)
    )
    bw, lat = parallel.interconnect_bandwidth_bytes_per_s, parallel.interconnect_latency_s
    # the all-reduce's bus bandwidth (`allreduce_bus_bandwidth_gb_per_s`), else the link rate
    ar_bw = parallel.allreduce_bandwidth_bytes_per_s or bw
    act = h * DEVICE_ACTIVATION_BYTES  # bytes per token crossing a link
    # TP: 2 all-reduces per layer.
    n_ar = ALLREDUCES_PER_LAYER * L if tp > 1 else 0
    policy = parallel.allreduce_policy
    per_token = per_pass = 0.0
    allreduce = None
    if policy is not None and policy.custom and n_ar:
        # the engine's custom all-reduce by message size, NCCL's ring beyond it; a shot of the custom kernels
        # and a ring step both at the collective step latency (the family's fitted one: module docstring)
        hop = parallel.custom_hop_latency_s if parallel.custom_hop_latency_s is not None else lat
        allreduce = TPAllReduce(n_ar, tp, act, bw, ar_bw, hop, lat, policy)
    else:
        # ring: 2(N-1)/N x bytes / busbw + 2(N-1) x latency each (linear in the tokens)
        per_token = n_ar * ring_allreduce_s(act, tp, ar_bw, 0.0)
        per_pass = n_ar * ring_allreduce_s(0.0, tp, ar_bw, lat)
    ar_token, ar_pass = per_token, per_pass  # the layers' all-reduces (the per-layer floor bounds them)
    # PP: one point-to-point send per stage boundary.
    per_token += (pp - 1) * act / bw
    per_pass += (pp - 1) * lat
    # micro-batches in flight: pp (GPipe-style overlap), or 1 when the engine runs each pass through the
    # stages one after the other (llama.cpp --split-mode layer): a step is then sum_p stage_p + the hops
    microbatches = pp if parallel.microbatch_overlap else 1
    return Placement(parts, microbatches=microbatches, comm_s_per_token=per_token, comm_s_per_pass=per_pass,
                     allreduce=allreduce, layer_comm_s_per_token=ar_token, layer_comm_s_per_pass=ar_pass,
                     extra_overhead_s=parallel.executor_step_s)  # the executor's per-step host round trip


def _offload_placement(model: "ModelSpec", params: "CostParams", offload: OffloadConfig) -> Placement:
    L = model.n_layers
    on_gpu, head_on_gpu = offload_split(L, offload.gpu_layers)
    host = offload.host_params
    parts = []
    if on_gpu < L or not head_on_gpu:
        parts.append(DevicePart("host", (L - on_gpu) / L, not head_on_gpu, host.bandwidth_bytes_per_s,
                                host.matmul_flops_per_s, host.attention_flops_per_s,
                                upload_min_tokens=offload.op_offload_min_tokens,
                                upload_bandwidth_bytes_per_s=offload.link_bandwidth_bytes_per_s,
                                upload_matmul_flops_per_s=params.matmul_flops_per_s,
                                upload_chunk_tokens=offload.ubatch_tokens))
    if on_gpu or head_on_gpu:
        parts.append(DevicePart("gpu", on_gpu / L, head_on_gpu, params.bandwidth_bytes_per_s,
                                params.matmul_flops_per_s, params.attention_flops_per_s,
                                matvec_s_per_weight=params.matvec_s_per_weight))
    # The hidden states cross the link once when the host runs layers (or embeddings) and the GPU
    # runs the rest: embedding rows -> host layers -> link -> GPU layers -> output.
    crossings = 1 if head_on_gpu else 0
    act = model.hidden_size * HOST_ACTIVATION_BYTES
    host_runs_layers = on_gpu < L
    return Placement(
        tuple(parts), microbatches=1,
        comm_s_per_token=crossings * act / offload.link_bandwidth_bytes_per_s,
        comm_s_per_pass=crossings * offload.link_latency_s,
        extra_overhead_s=offload.host_iteration_overhead_s if host_runs_layers and head_on_gpu else 0.0,
        overhead_params=None if head_on_gpu else host,
    )
