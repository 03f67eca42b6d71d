"""The physical cost model: seconds for one engine iteration, from the shape of its batch.

One iteration (one forward pass of the engine) processes some prefill chunks (P_i new prompt tokens
of a sequence that already has C_i tokens in its KV cache) and some decode sequences (one new token
each, sequence j having D_j tokens in its KV cache). Its time is a roofline per kernel group plus
overheads:

    gemm_s      = max(matmul_flops / matmul_flops_per_s, weight_bytes / bandwidth_bytes_per_s)
    attention_s = max(attention_flops / attention_flops_per_s,
                      (kv_read_bytes + kv_write_bytes) / bandwidth_bytes_per_s)
    step_s      = gemm_s + attention_s + iteration_overhead_s + per_sequence_overhead_s x sequences

(written as max(compute_s, memory_s) + overheads with compute_s = gemm_s + attention FLOP time and
memory_s = gemm_s + K/V time: `CostModel._terms`)

with (T = new tokens = sum P_i + number of decodes; N = sequences = number of chunks + decodes;
kappa(c) = L_full x c + L_swa x min(c, W) = tokens of a c-token context summed over layers, which is
L x c for a model without sliding-window layers):

    matmul_flops    = 2 x (matmul params without the LM head) x T        [FLOP; 2 = multiply + add]
                    + 2 x (vocab x hidden) x N                            [LM head: logits only for the last
                                                                           position of each sequence, as vLLM
                                                                           and llama.cpp compute them]
    matmul_s        = 2 x (params without LM head) x start(T) / matmul_flops_per_s
                    + 2 x (vocab x hidden) x rows(N) / matmul_flops_per_s
        start(n)    = n + n_half x [n >= 2]                               [Hockney's half-performance length,
                                                                           `gemm_start_rows`]
        rows(n)     = start(n) + (n_half + n mod 4) x [n > 4, n mod 4 > 0] [+ leftover tile pass, `gemm_rows`]
    attention_flops = 4 x heads x head_dim x layer_keys                   [FLOP; QK^T and PV, 2 each]
        layer_keys  = sum_i sum_{t=1..P_i} kappa(C_i + t) + sum_j kappa(D_j + 1)
                      (chunk token t attends to the C_i cached tokens, itself and the tokens before it —
                       causal; a decode token attends to its D_j cached tokens and itself)
    weight_bytes    = bytes of every weight matrix streamed once per iteration      [B]
                      (dense: all weights except an untied input-embedding table, of which only T rows
                       are gathered; MoE: see `expected_distinct_experts`)
    kv_read_bytes   = kv_bytes_per_layer_token x (sum_i kappa(C_i) + sum_j kappa(D_j))   [B]
    kv_write_bytes  = kv_bytes_per_layer_token x L x T                              [B]

kv_bytes_per_layer_token = 2 (K and V) x kv_heads x head_dim x bytes per element (ModelSpec); where the
full-attention layers have a shape of their own (Gemma 4), kappa counts each as w sliding layers, w its
cached bytes (reads, writes: L -> L_swa + w_kv L_full) or attention FLOPs (keys) over a sliding layer's
(sim.cost.layer_tokens).

Attention without flash attention (`flash_attention=False`, the engine's `flash_attention`): the
kernels then materialise the attention scores in memory, and their memory line is

    r x kv_read_bytes + kv_write_bytes + score_bytes_per_layer_key x layer_keys,
    score_bytes_per_layer_key = SCORE_BYTES x heads
    r = min(heads / kv_heads, unfused_kv_reads)   [reads of each cached K/V element per pass]

SCORE_BYTES = 16 bytes per (query row, key, head, layer): ggml's attention without flash attention
(src/llama-graph.cpp build_attn_mha) computes kq = mul_mat(k, q) into an fp32 tensor of n_kv x rows
x heads (written, 4 B), soft_max_ext reads it and writes its result (4 + 4 B), and mul_mat(v, kq)
reads that (4 B). A flash-attention kernel keeps the scores in registers and shared memory, so
its memory line is the K/V alone. At 4 x head_dim FLOPs per 16 bytes (32 FLOP/B for head_dim 128)
the unfused path is bandwidth-bound on every GPU of the catalog (an A100 needs 153 FLOP/B to be
compute-bound), which is why llama.cpp's 2023-24 builds (flash attention off by default until
PR #15434, 2025-08) show attention rates of a few percent of peak. Held out by device over the
public corpus: p90 31.1 -> 29.5%, rows past 25% 185 -> 163 (docs/public-calibration.md, round 18).

The unfused products also read the cache more than once under grouped-query attention: kq =
mul_mat(k, q) and kqv = mul_mat(v, kq) broadcast each of the kv_heads K/V heads over its group of
heads / kv_heads query heads, and the kernels fetch the K/V head once per query head — CUDA (and
HIP) builds of 2023-24 run them as one batched cuBLAS GEMM whose batch entries point each query head
at its K/V head (ggml-cuda.cu `ggml_cuda_mul_mat_batched_cublas`, their path on every GPU with fast
fp16), and Metal's mat-vec kernels, like CUDA's later ones, index the K/V head per query head (a
channel ratio). What a cache catches of the
repeat fetches is the chip's: r (`unfused_kv_reads`, per backend: sim.cost.llamacpp
`UNFUSED_KV_READS`, chosen on the public corpus) is the effective reads, capped at the group (no
reuse); a model without GQA (heads = kv_heads) reads its cache once. The evidence is the context
slope of single-stream decode: XiongjieDai's llama-bench tables decode Llama 3 8B (32 query heads,
8 K/V heads) 7.5-12.2 KB slower per (cached token, layer) between tg512 and tg8192 on five CUDA
GPUs at their fitted bandwidths, where one read of K and V plus the scores is 4.6 KB; every device's
tg8192 read 5-25% fast in sample with one read.

Why max within a kernel and a sum across: inside one kernel the GPU (or CPU) streams its operands
from memory while its matmul units work on what already arrived — the two resources overlap, and the
one that needs longer sets the pace (the roofline model, Williams et al., CACM 2009); a sum there
would charge a bandwidth-bound decode step its (small) FLOP time on top. But the kernels of a step run
one after the other (a CUDA stream, a CUDA graph, llama.cpp's graph of ops with a barrier between
ops), so a compute-bound kernel cannot hide a memory-bound one. The two groups that matter are the
weight GEMMs (weights against matmul FLOPs) and the attention kernels (K/V against attention FLOPs):
a long prompt's attention is compute-bound after GEMMs that are too, and batched decode at deep
context streams K/V after weight-bound GEMMs. One max over the iteration's totals (this model until
the public fit showed otherwise) priced a prefill-heavy step as if its attention could hide under
the weight stream; per group, the TensorRT-LLM rows of the public corpus fit 9.4 -> 6.7 % (H100)
and 8.1 -> 6.8 % (H200) median in sample, and held out by device all rows 12.4 -> 11.5 %
(docs/public-calibration.md, round 12). What the two groups leave out (activation traffic, norms,
all-reduces, kernel launch gaps) is absorbed by the measured efficiencies and overheads that
`CostParams` holds.

Matrix-kernel efficiency vs rows (`matmul_half_rows` = n_half, default 0 = the plain roofline).
A matmul over n activation rows (n = T for the layers, N for the LM head) runs at Hockney's
vector-performance law (Hockney & Jesshope, Parallel Computers 2, 1988: rate(n) = r_inf x n /
(n + n_1/2)) once the kernel is a tiled GEMM, so its time is flops_per_row x (n + n_half) / r_inf:
a fixed, weight-proportional start-up (each weight block is loaded and unpacked once per tile
pass, whatever the number of columns sharing it) plus a per-row cost. A single row is a GEMV,
another kernel, priced by the plain roofline (in practice memory-bound). The switch is llama.cpp's
CPU backend: `llamafile_sgemm` (ggml/src/ggml-cpu/llamafile/sgemm.cpp) returns false for n < 2
("only enable sgemm for prompt processing"), so one-row products of Q8_0/Q5_0/Q4_0 weights take
ggml's vec_dot GEMV and two or more rows take tinyBLAS's tiles. Measured on a 2-core EPYC with
Gemma 3 270M Q4_K_M (1 thread): a decode step takes 25 ms for 1 sequence, 56 ms for 2 (2.2x: the
GEMM start-up), then ~10 ms per extra sequence (118 ms at 8, 150-197 ms at 16), which max(compute,
memory) + linear overheads cannot produce; with logits for only one sequence (LM head stays a GEMV)
16 sequences take 75 ms. The leftover-tile pass past a multiple of 4 rows (`gemm_rows`) is priced
for the LM head only: the layers' rows pay the start-up alone (`gemm_start_rows`, where the
measurement that tells them apart is). n_half is fitted by calibration (calibrate/fit.py); GPU
presets keep 0. For a fixed decode batch n the term is a constant per step, so the closed forms
below stay exact.
Tensor- and pipeline-parallel placements (sim.cost.parallel) apply the device's n_half to each part
(`DevicePart.matmul_half_rows`: every device of a TP group runs its GEMMs on the same T rows, its
start-up is its 1/N of the weights); partial-offload placements do not.

Decode attention (`decode_attention_slowdown` = s, default 1 = the plain model). The attention FLOPs of
decode tokens are priced s times those of prompt tokens:

    attention_s = 4 x heads x head_dim x (prompt_layer_keys + s x decode_layer_keys) / attention_flops_per_s

A prompt chunk's attention is a matrix-matrix product (P query rows share every K/V element they load);
a decode token brings one query row per sequence, so its QK^T and PV are matrix-vector products over
that sequence's cache, and the softmax over the keys is done per row: less arithmetic per byte and
per instruction, a lower FLOP rate on CPUs. Measured with Gemma 3 270M Q4_K_M on a 2-core EPYC (1
thread): 16 sequences decode in 145 ms at 74 cached tokens and 178 ms at 522, 4.5 us per extra
(sequence x cached token) for the 4 x 4 x 256 x 18 attention FLOPs involved; full calibrations there
fit s = 1.8-2.4 (decode attention at 17-20 GFLOP/s, prompt attention at 32-49). Calibration fits s; GPU presets
keep 1 (their decode attention kernels are bandwidth-bound on the KV cache, which memory_s prices).
In a run of decode steps every key is a decode key, so the closed forms below just scale their
attention slope by s. Placements over several devices (sim.cost.parallel) do not apply it.

Padded KV views (`kv_pad` = the engine's `kv_padding_for(model)`, default 0 = the causal keys above).
llama.cpp builds a pass's K, V and mask as views of n_kv cells, n_kv = the highest cell in use after
the pass rounded up to 256 (the maximum over the pass's KV streams; src/llama-kv-cache.cpp
`get_n_kv`), and computes the masked cells too. With kv_pad the aggregates become

    layer_keys      = rows x kappa_pad(n_kv)          (every row, prompt or decode, spans n_kv cells)
    kv_read         = sequences x kappa_pad(n_kv)     (each sequence's view of n_kv cells is read)
    kappa_pad(n)    = L_full x n + L_swa x min(n, pad(W + rows per sequence))

so attention is a step function of the longest context: measured on Gemma 3 270M Q4_K_M (1 thread),
a 256-token prompt took 544 ms and a 257-token one 601 ms; from 200 to 512 tokens the time is
1.91 ms x P + 0.84 us x P x n_kv within 4 %, where the causal sum missed by up to 9 %. In a run of
decode steps n_kv is constant between the steps where the longest sequence crosses a multiple of
kv_pad, so the closed forms below get one flat segment per block (`_padded_decode_aggregates`).
The sliding-window layers' own cache is approximated by the window plus the pass's rows, padded.

Activation traffic (about 2 x hidden bytes per token per layer) is ignored: it is < 1% of the weight
bytes for a decode step and prefill is compute-bound.

Runs of decode steps (the simulator's fast-forward): with a fixed batch of n sequences whose contexts
grow by one per step, gemm_s is the same every step (n rows, n logits) and sits in both lines'
intercepts, and compute_i and memory_i are linear in i (on segments between the steps where a
sequence reaches a sliding window), so sum_{i<k} max(compute_i, memory_i) is a sum of arithmetic
series split at the crossover index — exact and O(1) per segment (`decode_run_time`), and its
integer inverse (`decode_steps_within`) comes from the quadratic formula plus an exact correction.

Unified-memory SoCs and CPUs use the same formulas with their own bandwidth and FLOP/s. The seven
numbers in `CostParams` are the only free parameters: calibration fits them with `predict_times`
(on one device; the placements below apply on top of the fitted values).

Several devices (`parallel=ParallelConfig(tp, pp, ...)`) or partial offload (`offload=OffloadConfig`)
turn the single roofline into a `sim.cost.parallel.Placement`: parts (a TP group priced as one device
of tp x the rates, a pipeline stage, the host's layers) that one micro-batch passes in sequence,

    iteration_s = max(sum_p stage_p + comm_s_per_token x T_b + comm_s_per_pass, m x max_p stage_p) + overheads
    stage_p     = gemm_p + max(attention FLOPs_p, K/V_p)   (as one device, on the part's rates)

on the micro-batch's aggregates (T_b = T / m, m = min(pp, sequences); the second term of the outer
max — each stage handling all m micro-batches — only exists for pp > 1). Each part's terms are the
formulas above restricted to its share of the layers (and the LM head where it sits); the all-reduce
and transfer terms are linear in tokens. A decode run is then a sum over parts of the same
max-of-two-lines series plus a constant per step (with pp, a convex piecewise-linear function summed
piece by piece between line crossings), so `decode_run_time` stays an exact closed form and
`decode_steps_within` its exact inverse (bisection on the closed form). Speculative decoding
wraps a CostModel: `sim.cost.speculative.SpeculativeCostModel`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from sim.catalog.models import ModelSpec
from sim.catalog.layer_floor import layer_floor_total_s
from sim.catalog.quant import QuantFormat
from sim.cost.decode_runs import DecodeRuns
from sim.cost.features import CalibrationFeatures, StepFeatures  # noqa: F401 (re-exported, as are the kernels names)
from sim.cost.kernels import (MATVEC_MAX_ROWS, expected_distinct_experts, extra_expert_bytes,  # noqa: F401
                              layer_floor_stream_s, moe_weight_bytes_read, pool_experts, weight_stream_s)
from sim.cost.graphs import CudaGraphs
from sim.cost.layer_tokens import LayerTokens
from sim.cost.padded import PaddedViews
from sim.cost.placed import PlacedSteps
from sim.cost.split_kv import SplitKV, split_kv_s
from sim.cost.llamacpp import (MMQ_MIN_ROWS, DecodeCorrection, _mmq_tile_traffic_one, gemm_rows, gemm_start_rows,
                               llamacpp_kernel_args, mmq_tile_traffic_bytes, moe_expert_rows)
from sim.cost.parallel import OffloadConfig, ParallelConfig, build_placement
from sim.cost.params import CostParams

if TYPE_CHECKING:
    from sim.catalog.engine_config import EngineConfig
    from sim.catalog.hardware import HardwareProfile
    from sim.cost.llamacpp import Pass, Piece

SCORE_BYTES = 16.0


class CostModel(LayerTokens, DecodeRuns, PaddedViews, PlacedSteps, CalibrationFeatures, CudaGraphs):
    """Seconds per engine iteration for one model, quantization, KV dtype and `CostParams`.

    By concern: the physics of one iteration here; runs of decode steps and the engine's step-pricing protocol in
    `sim.cost.decode_runs.DecodeRuns`; padded KV views in `sim.cost.padded`; placements over several devices in
    `sim.cost.placed`; the calibration's feature rows and breakdowns in `sim.cost.features`."""

    def __init__(
        self,
        model: ModelSpec,
        quant: str | QuantFormat,
        params: CostParams,
        kv_dtype: str = "fp16",
        *,
        parallel: "ParallelConfig | None" = None,
        offload: "OffloadConfig | None" = None,
        decode_correction: DecodeCorrection | None = None,
        kv_pad: int = 0,
        flash_attention: bool = True,
        moe_expert_tile: int = 0,
        mmq_tile_bandwidth: float = 0.0,
        unfused_kv_reads: float = 1.0,
        graph_sizes: Sequence[int] | None = None,
        eager_overhead_s: float = 0.0,
        graph_padding: bool = True,
        layer_floor_s: float = 0.0,
        split_kv: SplitKV | None = None,
        layer_floor_dense_s: float | None = None,
        layer_floor_stream_ratio: float = 0.0,
    ):
        self.model = model
        # The per-layer kernel floor (EngineConfig.layer_floor_us, docs/cost-model.md 'Per-layer kernel floor'):
        # GEMMs + all-reduces last at least the sum of the layers' floors, n_routed_layers x layer_floor_s +
        # the other layers x layer_floor_dense_s (None: n_layers x layer_floor_s; sim.catalog.layer_floor). 0 = none.
        self.layer_floor_s = float(layer_floor_s)
        self.gemm_floor_s = layer_floor_total_s(model, self.layer_floor_s, layer_floor_dense_s)
        # its form (EngineConfig.layer_floor_plus_stream): 0 = the chain alone; r > 0 = the chain + the weight bytes at
        # bandwidth x r, r = datasheet / effective bandwidth (sim.cost.kernels.layer_floor_stream_s)
        self.floor_stream_ratio = float(layer_floor_stream_ratio)
        self.split_kv = split_kv  # a capped split-KV decode attention's serial chain (sim.cost.split_kv); None = none
        # CUDA-graph decode batches (EngineConfig.cuda_graph_sizes, increasing; None = not modelled) and
        # the host cost of a step launched eagerly above the largest (`graph_extra_s`)
        self.graph_sizes = tuple(graph_sizes) if graph_sizes else None
        self.eager_overhead_s = float(eager_overhead_s)
        self.graph_padding = bool(graph_padding)
        self._graph_extra: dict[int, tuple[float, CostParams]] = {}
        # llama.cpp's CUDA MMQ tile traffic priced at this bandwidth [B/s] as a floor of the weight GEMMs of steps
        # of more than 8 rows (sim.cost.llamacpp `mmq_tile_traffic_bytes`, `cuda_mmq_tile_bandwidth`); 0 = none
        self.mmq_tile_bandwidth = float(mmq_tile_bandwidth)
        # llama.cpp's CUDA MMQ tile width for routed experts (sim.cost.llamacpp `cuda_moe_expert_tile`;
        # 0 = a Hockney start-up per touched expert): `_layer_matmul_flops`
        self.moe_expert_tile = int(moe_expert_tile)
        # Attention over padded KV views (EngineConfig.kv_padding_for: attention_kv_padding, 0 where flash
        # attention skips masked cells; 0 = exact causal keys)
        self.kv_pad = int(kv_pad)
        self.quant = model.quant(quant)
        self.params = params
        self.kv_dtype = kv_dtype
        lm_head = model.vocab_size * model.hidden_size
        # FLOPs per new token in every matmul but the LM head; FLOPs of the LM head per sampled sequence.
        self.flops_per_token = 2.0 * (model.matmul_params_active - lm_head)
        # MoE: one row through one routed expert's FFN in every layer [FLOP], and the FLOPs per token
        # outside the routed experts (attention projections, router, shared experts). The routed
        # experts' GEMMs run per touched expert over that expert's rows only (grouped GEMM, llama.cpp
        # mul_mat_id), so their start-up (Hockney's n_1/2) is paid once per touched expert
        # (`_layer_matmul_flops`).
        self.expert_flops_per_row = 2.0 * model.n_routed_layers * model.ffn_params_per_expert if model.is_moe else 0.0
        self.non_expert_flops_per_token = self.flops_per_token - model.n_experts_active * self.expert_flops_per_row
        self.flops_per_sequence = 2.0 * lm_head
        # Attention FLOPs per (query token, key, attention layer): 2 (QK^T, PV) x 2 (multiply-add) x heads x
        # head_dim for GQA; MLA's absorbed form (sim.catalog.architectures). A prompt's keys cost
        # `prompt_key_flops_ratio` times that (MLA prefill runs unabsorbed over up-projected K/V; 1 for GQA).
        self.attention_flops_per_layer_key = model.attention_flops_per_layer_key()
        self.prompt_key_flops_ratio = model.attention_flops_per_layer_key(prompt=True) / self.attention_flops_per_layer_key
        self._init_layer_counts(model)  # layer counts, per layer type (sim.cost.layer_tokens)
        # K and V bytes of one token in one attention layer: 2 x kv_heads x head_dim (MLA: r + d_R) x bytes; with
        # per-layer-type shapes a sliding-window layer's (kv_layers counts the full ones in its units)
        self.kv_bytes_per_layer_token = model.kv_bytes_per_token(kv_dtype) / self.kv_layers
        # Hybrid models: each sequence's fixed-size recurrent state is read and written once per step [B],
        # and the recurrences' FLOPs per new token (priced with the weight GEMMs); 0 without such layers
        self.state_bytes_per_sequence_step = 2.0 * model.state_bytes_per_sequence(kv_dtype)
        self.recurrent_flops_per_token = model.recurrent_flops_per_token
        # Attention scores through memory per (query token, key, layer): SCORE_BYTES x heads without
        # flash attention (the engine's flash_attention), 0 with it (module docstring).
        self.flash_attention = bool(flash_attention)
        self.score_bytes_per_layer_key = 0.0 if flash_attention else SCORE_BYTES * model.n_heads
        # K/V bytes read per cached token and layer: once with flash attention; without it each K/V head once
        # per query head of its group, of which a cache catches part (`unfused_kv_reads`; module docstring)
        group = 1 if model.mla is not None else model.n_heads // model.n_kv_heads  # MLA: one latent for all heads
        self.kv_read_bytes_per_layer_token = self.kv_bytes_per_layer_token * (
            1.0 if flash_attention else min(float(group), max(1.0, float(unfused_kv_reads))))
        # Weights streamed from memory per iteration. The untied input embedding is a gather of T rows, not a
        # streamed matrix, so its bytes are left out: its own bytes (`ModelSpec.vocab_bytes`: V*h at the format's
        # embedding width, scaled to the real file), not its share of the parameters (~0.8 GB of gpt-oss-20b).
        total = model.weight_bytes(self.quant)
        embedding, head = model.vocab_bytes(self.quant)
        streamed = total - (0.0 if model.tie_embeddings else embedding)
        self.expert_bytes = model.expert_bytes(self.quant)  # one routed expert, all layers [B]
        # expert parallelism: ranks holding whole experts (1 = experts split like every matrix)
        self.ep_ranks = parallel.tp if parallel is not None and parallel.expert_parallel and model.is_moe else 1
        self.non_expert_bytes = streamed - model.n_experts * self.expert_bytes
        self.dense_weight_bytes = streamed
        # The LM head's bytes, for placements that put it on one device (the last pipeline stage, the
        # GPU under partial offload).
        self.head_bytes = head
        # `mmq_tile_traffic_bytes`' model arguments (dense bytes without the LM head, one routed expert's
        # bytes, active experts, routing pool, MACs per token), for `_mmq_tile_s`
        moe = model.is_moe
        self._mmq_tile_args = (
            (self.non_expert_bytes if moe else self.dense_weight_bytes) - head,
            self.expert_bytes if moe else 0.0, model.n_experts_active if moe else 0,
            pool_experts(model.n_experts, model.n_experts_active, model.expert_pool_fraction) if moe else 0.0,
            self.flops_per_token / 2.0)
        # Matmul weights per streamed byte (one token's: layers, MoE active experts, and LM head), which
        # turns a step's streamed bytes into the weights its mat-vec kernels dequantize (`weight_stream_s`)
        self._weight_bytes: dict = {}  # (type, scalar tokens) -> `weight_bytes_read` (sim.cost.kernels)
        self.one_token_weight_bytes = one_token = self.weight_bytes_read(1.0)  # (and `extra_expert_bytes`)
        self.matvec_weights_per_byte = model.matmul_params_active / one_token if one_token > 0 else 0.0
        self.parallel = parallel
        self.offload = offload
        # How the work is spread over devices (sim.cost.parallel); None = one device holds everything.
        self.placement = build_placement(model, params, parallel, offload)
        # Measured decode-step correction of a calibrated model (DecodeCorrection); one device only.
        self.decode_correction = decode_correction if self.placement is None else None
        # what a speculative model (sim.cost.speculative) reports differently: one token per sequence and
        # step, no draft model's weights beside this model's
        self.tokens_per_step = 1.0
        self.extra_weight_bytes = 0.0
        self._factors: dict[int, float] = {}
        self._decode_consts: dict[int, tuple] = {}  # batch size -> `_decode_constants`
        self._params_of, self._params_tuple = None, ()  # `_param_tuple()` of the params object `_params_of`
        # a decode batch's step time is one pair of lines in the step index, from its size and the sum
        # of its contexts (`_decode_lines_of_sum`; the protocol's `run_time` then needs no contexts)
        self._one_line = (self.window is None and not self.kv_pad and self.placement is None
                          and self.decode_correction is None)

    @classmethod
    def from_names(
        cls,
        model: str | ModelSpec,
        quant: str | QuantFormat | None = None,
        hw: "str | HardwareProfile" = "h100-sxm",
        engine: "str | EngineConfig" = "vllm",
        params: CostParams | None = None,
    ) -> "CostModel":
        """Resolve names (or pass objects): quant defaults to the engine's default, KV dtype is the engine's.

        The engine's `tp`, `pp` and `gpu_layers` (an int, or "auto": the most layers that fit,
        `sim.cost.memory.auto_gpu_layers`, with the engine's KV buffer) set the placement, the host
        profile being `engine.offload_host`. `params` replaces the profile-derived parameters
        (a calibration). Speculative decoding wraps the result: `sim.cost.speculative.make_cost_model`.
        """
        from sim.catalog.engine_config import EngineConfig, load_engine
        from sim.catalog.hardware import HardwareProfile, load_profile
        from sim.catalog.lookup import get_model

        spec = model if isinstance(model, ModelSpec) else get_model(model)
        eng = engine if isinstance(engine, EngineConfig) else load_engine(engine)
        spec = spec.as_loaded_by(eng.kernel_family)  # GGUF file sizes for llama.cpp's family only
        prof = hw if isinstance(hw, HardwareProfile) else load_profile(hw)
        q = spec.quant(quant or eng.default_quant)
        params = params or CostParams.from_profile(prof, q, eng, spec.is_moe)
        # an engine family's fitted all-reduce step latency replaces the profile's (Efficiency)
        latency_us = prof.efficiency_for(eng.name, eng.efficiency_family(prof)).interconnect_latency_us
        parallel = (ParallelConfig.for_profile(prof, eng.tp, eng.pp, latency_us=latency_us,
                                               expert_parallel=eng.expert_parallel, engine=eng)
                    if eng.tp * eng.pp > 1 else None)
        offload = None
        if eng.gpu_layers is not None:
            from sim.cost.memory import resolve_gpu_layers

            gpu_layers = resolve_gpu_layers(prof, spec, q, eng)
            offload = OffloadConfig.for_profiles(prof, load_profile(eng.offload_host), q, gpu_layers, eng)
        # the calibration's measured decode correction, for the model and engine it measured, when the
        # parameters are the profile's own (the correction is relative to their predictions)
        correction = None
        if parallel is None and offload is None and params == CostParams.from_profile(prof, q, eng, spec.is_moe):
            correction = DecodeCorrection.from_profile(prof, spec, q, eng)
        return cls(spec, q, params, kv_dtype=eng.kv_dtype, parallel=parallel, offload=offload,
                   decode_correction=correction, kv_pad=eng.kv_padding_for(spec),
                   flash_attention=eng.flash_attention_for(spec),
                   graph_sizes=eng.cuda_graph_sizes, eager_overhead_s=eng.eager_overhead_ms / 1e3,
                   graph_padding=eng.cuda_graph_padding, layer_floor_s=eng.layer_floor_us / 1e6,
                   layer_floor_dense_s=None if eng.layer_floor_dense_us is None else eng.layer_floor_dense_us / 1e6,
                   split_kv=SplitKV.for_engine(eng, spec),
                   layer_floor_stream_ratio=prof.bandwidth_bytes_per_s / params.bandwidth_bytes_per_s
                   if eng.layer_floor_plus_stream else 0.0,
                   **llamacpp_kernel_args(prof, eng.kernel_family, q))

    # ---- the physics, on aggregates (scalars or arrays) ------------------------------------------
    def weight_bytes_read(self, new_tokens):
        """Weight bytes streamed in one iteration of `new_tokens` tokens [B].

        Dense: every streamed matrix once. MoE: the non-expert weights (attention, router, shared
        experts, LM head) once, plus one read per distinct routed expert the batch touches.
        """
        if not self.model.is_moe:
            return self.dense_weight_bytes  # broadcasts against array arguments
        return moe_weight_bytes_read(self, new_tokens)

    def _layer_matmul_flops(self, tokens, half: float):
        """FLOP-equivalents of the layers' matmuls over `tokens` rows (all but the LM head), start-up
        included: flops_per_token x start(T) for a dense model (`gemm_start_rows`). A MoE model's
        routed experts are E_t separate GEMMs (E_t = expected distinct experts touched by T tokens,
        `expected_distinct_experts`) of T k / E_t rows each, so they pay E_t start-ups:

            non_expert_flops_per_token x start(T) + expert_flops_per_row x (T k + E_t x n_1/2 x [T k / E_t >= 2])

        which equals flops_per_token x T when n_1/2 = 0. With few rows per expert (a 2048-token prompt
        over 128 experts, top-4: 64 rows each) the experts run well below the dense layers' rate, which
        public llama.cpp measurements of MoE prefill show (calibrate/public_fit.py).

        Under llama.cpp's CUDA kernels (`moe_expert_tile` > 0) the experts' rows are its MMQ tiles
        instead, each paying the start-up (sim.cost.llamacpp `moe_expert_rows`):

            non_expert_flops_per_token x start(T) + expert_flops_per_row x moe_expert_rows(T)

        Scalars or arrays."""
        k = self.model.n_experts_active
        if self.moe_expert_tile and self.model.is_moe:
            e_c = pool_experts(self.model.n_experts, k, self.model.expert_pool_fraction)
            t = np.asarray(tokens, dtype=float)
            out = (self.non_expert_flops_per_token * gemm_start_rows(t, half)
                   + self.expert_flops_per_row * moe_expert_rows(t, k, e_c, self.moe_expert_tile, half))
            return out if np.ndim(tokens) else float(out)
        if not half or not self.model.is_moe:
            return self.flops_per_token * gemm_start_rows(tokens, half)
        t = np.asarray(tokens, dtype=float)
        touched = np.maximum(expected_distinct_experts(self.model.n_experts, k, t, self.model.expert_pool_fraction),
                             1e-12)
        startups = np.where(t * k / touched >= 2, touched * half, 0.0)
        out = self.non_expert_flops_per_token * gemm_start_rows(t, half) + self.expert_flops_per_row * (t * k + startups)
        return out if np.ndim(tokens) else float(out)

    def _mmq_tile_s(self, tokens):
        """Seconds llama.cpp's CUDA MMQ needs for its tile traffic in a pass of `tokens` rows
        (sim.cost.llamacpp `mmq_tile_traffic_bytes` / `mmq_tile_bandwidth`); 0 at up to 8 rows (the
        mat-vec kernels, MMQ_MIN_ROWS)."""
        if isinstance(tokens, (float, int)):  # one step, the simulator's hot path: plain floats, remembered
            return (_mmq_tile_traffic_one(float(tokens), *self._mmq_tile_args) / self.mmq_tile_bandwidth
                    if tokens > MMQ_MIN_ROWS else 0.0)
        t = np.asarray(tokens, dtype=float)
        traffic = mmq_tile_traffic_bytes(t, *self._mmq_tile_args)
        return np.where(t > MMQ_MIN_ROWS, traffic / self.mmq_tile_bandwidth, 0.0)

    def _kernel_terms(self, p: Sequence[float], tokens, seqs, layer_keys, kv_read_layer_tokens, decode_keys=0.0,
                      logits=None):
        """(matmul_s, weights_s, attention_s, kv_s, overhead_s) for aggregates (numpy-broadcast),
        under parameters p (`CostParams.FIELDS` order; shorter tuples take the trailing defaults):
        the weight GEMMs' FLOP time and weight-streaming time, the attention kernels' FLOP time and
        K/V read + write time, and the overheads. `decode_keys` is the part of `layer_keys`
        attended by decode tokens, which costs `decode_attention_slowdown` times as much per FLOP.
        `logits`: rows through the LM head when not one per sequence (a speculative verify step)."""
        trailing_defaults = (0.0, 1.0, 0.0)  # matmul_half_rows, decode_attention_slowdown, matvec_s_per_weight
        bw, mm, att, it_s, seq_s, half, slow, mv = tuple(p) + trailing_defaults[len(p) - 5:]
        effective_keys = layer_keys + (slow - 1.0) * decode_keys
        if self.prompt_key_flops_ratio != 1.0:  # MLA: prompt keys unabsorbed
            effective_keys = effective_keys + (self.prompt_key_flops_ratio - 1.0) * (layer_keys - decode_keys)
        rows = seqs if logits is None else logits
        matmul_s = (self._layer_matmul_flops(tokens, half) + self.flops_per_sequence * gemm_rows(rows, half)
                    + self.recurrent_flops_per_token * tokens) / mm
        if self.mmq_tile_bandwidth > 0:
            # llama.cpp's MMQ cannot run faster than its tile traffic at the datasheet bandwidth
            tile_s = self._mmq_tile_s(tokens)
            matmul_s = max(matmul_s, tile_s) if isinstance(tile_s, float) else np.maximum(matmul_s, tile_s)
        weights_s = weight_stream_s(tokens, self.weight_bytes_read(tokens), bw, self.matvec_weights_per_byte, mv)
        if self.gemm_floor_s > 0:
            # the layers' kernel floors summed by kind (`gemm_floor_s`; TP: sim.cost.placed) in the engine's form
            floor_s = self.gemm_floor_s + layer_floor_stream_s(self, tokens, bw)  # (+ extra experts, or the stream)
            weights_s = max(weights_s, floor_s) if not (np.ndim(weights_s) or np.ndim(floor_s)) else np.maximum(weights_s, floor_s)
        attention_s = self.attention_flops_per_layer_key * effective_keys / att + split_kv_s(self.split_kv, decode_keys, seqs)
        kv_s = (self.kv_read_bytes_per_layer_token * kv_read_layer_tokens
                + self.kv_bytes_per_layer_token * self.kv_layers * tokens
                + self.score_bytes_per_layer_key * layer_keys + self.state_bytes_per_sequence_step * seqs) / bw
        return matmul_s, weights_s, attention_s, kv_s, it_s + seq_s * seqs

    def _terms(self, p: Sequence[float], tokens, seqs, layer_keys, kv_read_layer_tokens, decode_keys=0.0,
               logits=None):
        """compute_s, memory_s, overhead_s such that the step takes max(compute_s, memory_s) + overhead_s
        (`_kernel_terms`' arguments):

            compute_s = gemm_s + attention_s,   memory_s = gemm_s + kv_s,
            gemm_s    = max(matmul_s, weights_s)

        so the step is gemm_s + max(attention_s, kv_s) + overheads: the weight GEMMs and the
        attention kernels each at their own roofline, one after the other (the module docstring).
        Two lines sharing gemm_s keep every caller's max(compute, memory) and the decode runs'
        max-of-two-lines closed forms."""
        matmul_s, weights_s, attention_s, kv_s, overhead_s = self._kernel_terms(
            p, tokens, seqs, layer_keys, kv_read_layer_tokens, decode_keys, logits)
        # (one step's floats: the builtin max, the same value as numpy's without its call overhead)
        gemm_s = max(matmul_s, weights_s) if type(matmul_s) is float and type(weights_s) is float \
            else np.maximum(matmul_s, weights_s)
        return gemm_s + attention_s, gemm_s + kv_s, overhead_s

    # ---- one iteration ---------------------------------------------------------------------------
    def _aggregate(self, prefill_tokens, prefill_context, decode_context,
                   outputs: int | None = None) -> tuple[float, float, float, float, float]:
        """(new_tokens, sequences, attention_layer_keys, kv_read_layer_tokens, decode_layer_keys) of one
        iteration. `sequences` drives the LM head's rows and the per-sequence overhead (sampling):
        one per chunk and decode, or `outputs` when given — the rows whose logits are computed,
        fewer when a chunk is not its prompt's last (`sim.cost.llamacpp`)."""
        if len(prefill_tokens) != len(prefill_context):
            raise ValueError("prefill_tokens and prefill_context must have the same length")
        if self.kv_pad:
            return self._padded_aggregate(prefill_tokens, prefill_context, decode_context, outputs)
        tokens = seqs = keys = kv_read = 0.0
        for p, c in zip(prefill_tokens, prefill_context):
            tokens += p
            seqs += 1
            keys += self._chunk_layer_keys(p, c)
            kv_read += self.layer_tokens(c)
        n_d = len(decode_context)
        keys_before_decodes = keys
        if n_d:
            d = np.asarray(decode_context, dtype=float)
            tokens += n_d
            seqs += n_d
            if self.window is None:
                s_d = float(d.sum())
                keys += self.n_layers * (s_d + n_d)
                kv_read += self.n_layers * s_d
            else:
                keys += float(np.sum(self.layer_tokens(d + 1, keys=True)))
                kv_read += float(np.sum(self.layer_tokens(d)))
        return tokens, (seqs if outputs is None else float(outputs)), keys, kv_read, keys - keys_before_decodes

    def _param_tuple(self) -> tuple[float, float, float, float, float, float, float, float]:
        p = self.params
        return (p.bandwidth_bytes_per_s, p.matmul_flops_per_s, p.attention_flops_per_s,
                p.iteration_overhead_s, p.per_sequence_overhead_s, p.matmul_half_rows, p.decode_attention_slowdown,
                p.matvec_s_per_weight)

    def step_time(
        self,
        prefill_tokens: Sequence[int] = (),
        prefill_context: Sequence[int] = (),
        decode_context: Sequence[int] | np.ndarray = (),
        outputs: int | None = None,
    ) -> float:
        """Seconds of one iteration (see the module docstring for every term). Empty -> 0.0.
        `outputs`: rows with logits when not one per chunk and decode (`_aggregate`)."""
        t, n, keys, kv_read, dkeys = self._aggregate(prefill_tokens, prefill_context, decode_context, outputs)
        if t <= 0:
            return 0.0
        decode_only = not len(prefill_tokens) and n == len(decode_context)
        graphs = self.graph_extra_s(n) if self.graph_sizes is not None and decode_only else 0.0
        if self.placement is not None:
            rows = len(prefill_tokens) + len(decode_context)
            if self.prompt_key_flops_ratio != 1.0:  # MLA: prompt keys at the unabsorbed rate (`_kernel_terms`)
                keys = self.prompt_key_flops_ratio * (keys - dkeys) + dkeys
            return float(self.placed_time(t, rows, keys, kv_read, logits=n)) + graphs  # graphs per rank
        c, m, o = self._terms(self._param_tuple(), t, n, keys, kv_read, dkeys)
        o += graphs
        # the measured correction is for decode passes as the probes ran them (each row a next token, logits)
        if self.decode_correction is not None and decode_only:
            return float(max(c, m) + o) * self.decode_factor(len(decode_context))
        return float(max(c, m) + o)

    def passes_time(self, passes: "Sequence[Pass]") -> float:
        """Seconds of an iteration that llama.cpp runs as these passes over the weights
        (`sim.cost.llamacpp.split_equal`): each priced as an iteration of its own. A pass of one token
        per sequence is priced as decodes (its attention is matrix-vector, as a decode's, even for
        a prompt's first token riding along), a longer one as prompt chunks."""
        return sum(self.step_time(*self._pass_shape(p), outputs=p.outputs) for p in passes)

    def simple_passes_time(self, passes: "Sequence[Sequence[Piece]]") -> float:
        """Seconds of an iteration that llama.cpp runs as these passes of consecutive tokens
        (`sim.cost.llamacpp.split_simple`): each priced as an iteration of its own. A one-token
        piece with logits is a decode; the others are prompt chunks (logits only on a prompt's last)."""
        total = 0.0
        for ps in passes:
            decodes = [p.context for p in ps if p.tokens == 1 and p.output]
            chunks = [p for p in ps if not (p.tokens == 1 and p.output)]
            total += self.step_time([p.tokens for p in chunks], [p.context for p in chunks], decodes,
                                    outputs=sum(1 for p in ps if p.output))
        return total

    @staticmethod
    def _pass_shape(p: "Pass") -> tuple[tuple, tuple, tuple]:
        """(prefill_tokens, prefill_context, decode_context) a pass is priced as (`passes_time`)."""
        if p.tokens_per_seq == 1:
            return (), (), p.contexts
        return (p.tokens_per_seq,) * len(p.contexts), p.contexts, ()
