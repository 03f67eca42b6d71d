"""Serving-engine presets: how an engine schedules, allocates KV memory and what it costs in software.

An `EngineConfig` is data, read from a YAML preset in `sim/catalog/engines/` (or a user's YAML file, which
may start from a preset with `base: vllm`). It names the scheduler and KV allocator the simulator
uses, the engine's limits (concurrency, per-iteration token budget, KV block size, memory share),
its default quantization and KV dtype, multipliers on the hardware profile's efficiencies and the
engine's own per-iteration / per-sequence software overheads. Every preset cites where each default
comes from, with the engine version it was read from (`sources`).

The preset's sub-models (efficiency scale, sources, hardware rules, speculative settings, SGLang's
new-token ratio) live in `sim.catalog.engine_settings`, the `releases:` section's resolution in
`sim.catalog.releases`; both are importable from here.
"""

from __future__ import annotations

import difflib
import os
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

if TYPE_CHECKING:
    from sim.catalog.hardware import HardwareProfile
    from sim.catalog.models import ModelSpec

from sim.catalog.engine_settings import (  # noqa: F401  (RuleCondition: importable from here as before)
    GIB, EfficiencyScale, EngineSource, HardwareRule, NewTokenRatio, RuleCondition, SpeculativeSettings,
)
from sim.catalog.arrival_gate import ArrivalGateSettings
from sim.catalog.attention_settings import AttentionSettings
from sim.catalog.host_stage import HostStageSettings
from sim.catalog.layer_floor import LayerFloorSettings
from sim.catalog.prefill_graph_settings import PrefillGraphSettings
from sim.catalog.policies import SCHEDULERS, known_allocator, known_scheduler
from sim.catalog.quant import get_quant, kv_dtype_bytes
from sim.catalog.releases import EngineRelease, apply_release, covers_version, split_release
from sim.errors import ConfigError, pydantic_error_to_config_error
from sim.files import line_of

# A scheduling policy / KV allocator by name: one declared in sim.catalog.policies (by the engine's classes).
Scheduler = Annotated[str, BeforeValidator(known_scheduler)]
KVAllocatorKind = Annotated[str, BeforeValidator(known_allocator)]
# How `context_size` relates to slots (llama.cpp / Ollama style servers):
# - split:    one KV buffer of context_size tokens, each of the N slots owns context_size / N
#             (llama-server with an explicit --parallel N and no --kv-unified);
# - unified:  one KV buffer of context_size tokens shared by all slots, one request may use all of it
#             (llama-server's default since --parallel became auto: 4 slots + --kv-unified);
# - per_slot: context_size is each slot's own budget, the buffer holds N x context_size
#             (Ollama: the runner gets num_ctx x OLLAMA_NUM_PARALLEL).
ContextMode = Literal["split", "unified", "per_slot"]

_FROZEN = ConfigDict(extra="forbid", frozen=True)

# Preset names users type that are not file names.
_ALIASES = {
    "llama-server": "llama.cpp", "llamacpp": "llama.cpp", "llama_cpp": "llama.cpp", "transformers": "hf",
    "huggingface": "hf", "tensorrt-llm": "trtllm", "trt-llm": "trtllm", "text-generation-inference": "tgi",
    "mlx-lm": "mlx", "lm-studio": "lmstudio",
}


class EngineConfig(HostStageSettings, ArrivalGateSettings, LayerFloorSettings, PrefillGraphSettings,  # host_*:
                   AttentionSettings):  # .host_stage; recv/batch wait: .arrival_gate; layer_floor_us,
    # layer_floor_dense_us: .layer_floor; prefill_graphs: .prefill_graph_settings; flash attention, KV padding:
    # .attention_settings
    """One serving engine's policy and limits, as the simulator uses them."""

    model_config = _FROZEN

    name: str
    display_name: str = ""
    version: str = Field("", description="engine version the defaults were read from")
    release: str = Field("", description="the preset release these defaults describe (`--engine vllm@0.7`); '' = none")
    scheduler: Scheduler
    kv_allocator: KVAllocatorKind
    max_num_seqs: int = Field(gt=0, description="concurrency limit: running sequences / slots / static batch size")
    max_num_batched_tokens: int | None = Field(
        None, gt=0, description="tokens (prefill + decode) one iteration may process; None = no cap"
    )
    ubatch_tokens: int | None = Field(
        None, gt=0,
        description=(
            "physical batch: tokens one forward pass over the weights takes (llama.cpp -ub / n_ubatch, "
            "default 512). An iteration with more tokens runs as several passes, each streaming the weights "
            "and paying the GEMM start-up again: with one KV stream the batch's tokens in order, "
            "ubatch_tokens at a time (llama_batch_allocr::split_simple), with per_sequence_kv_streams "
            "split_equal's passes of at most this many. None = the whole iteration is one pass "
            "(the paged engines, whose token budget is the pass)"
        ),
    )
    block_size: int = Field(16, gt=0, description="tokens per KV block (paged allocator)")
    memory_fraction: float = Field(
        0.9, gt=0, le=1, description="share of device memory the engine uses for weights + activations + KV"
    )
    memory_fraction_of: Literal["total", "free"] = Field(
        "total",
        description=(
            "what memory_fraction is a share of: 'total' device memory (vLLM --gpu-memory-utilization, "
            "SGLang --mem-fraction-static) or the memory 'free' after the weights and one forward's "
            "activations (TensorRT-LLM kv_cache_free_gpu_memory_fraction)"
        ),
    )
    activation_reserve_fraction: float = Field(
        0.05, ge=0, lt=1, description="share of the engine's memory kept for activations / workspace, not KV"
    )
    context_size: int | None = Field(
        None, gt=0, description="server context in tokens (see context_mode for slots); None = model max"
    )
    context_mode: ContextMode = "split"
    per_sequence_kv_streams: bool = Field(
        False,
        description=(
            "one KV stream per sequence (llama.cpp with kv_unified off: llama-server with an explicit -np). "
            "llama.cpp then runs a batch as one pass over the weights per run of consecutive seq_ids with "
            "equal token counts (llama_batch_allocr::split_equal): an iteration mixing prompt chunks and "
            "decodes is a decode pass plus a prompt pass (the prompt's first token joins the decode pass "
            "when its slot follows theirs), and decodes whose slots are not contiguous take "
            "one pass per contiguous run. Slots are handed out lowest id first"
        ),
    )
    fit_context_to_memory: bool = Field(
        False, description="an unset context_size shrinks to what fits in memory (llama-server --fit on)"
    )
    min_fit_context: int = Field(4096, gt=0, description="smallest context --fit may choose (llama-server --fit-ctx)")
    default_quant: str = "bf16"
    kv_dtype: str = "fp16"
    kv_dtype_for_quant: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "KV-cache dtype the engine's `auto` picks for a checkpoint of this quantization (quant name -> "
            "dtype), e.g. TensorRT-LLM keeps an FP8 KV cache for ModelOpt FP8 checkpoints. A quantization "
            "not listed keeps `kv_dtype` (the model dtype); an explicit --kv-dtype wins (`for_checkpoint`)"
        ),
    )
    chunked_prefill_min_context: int | None = Field(
        None, gt=0,
        description=(
            "chunked prefill only for models whose max context exceeds this (vLLM V0: enabled by default when "
            "max_model_len > 32K); other models run the `continuous` scheduler with "
            "max_num_batched_tokens = max(max context, 2048). None = `scheduler` holds for every model"
        ),
    )
    admission_watermark: float = Field(
        0.0, ge=0, lt=1,
        description=(
            "share of the KV blocks kept free when a prompt is admitted: vLLM V0's BlockSpaceManager admits a "
            "prompt only if its blocks leave watermark x total blocks free (0.01, "
            "block_manager.can_allocate); V1 has none"
        ),
    )
    new_token_ratio: NewTokenRatio | None = Field(
        None, description="SGLang's reservation for tokens not yet generated (admission); None = reserve none (vLLM V1)"
    )
    cuda_graph_sizes: list[int] | None = Field(
        None,
        description=(
            "decode batch sizes captured as CUDA graphs: a decode-only step of n sequences runs the graph of "
            "the next captured size (its GEMMs priced at that many rows); above the largest it runs eagerly "
            "and pays eager_overhead_ms. None = no graphs modelled (engines without them, or whose launch "
            "cost is in iteration_overhead_ms)"
        ),
    )
    cuda_graph_padding: bool = Field(True, description=(
        "a decode batch between captured sizes is padded up to the next one (vLLM, SGLang); False: only "
        "batches of exactly a captured size replay a graph, the others run eagerly (TensorRT-LLM's "
        "CudaGraphConfig.enable_padding, default False)"))
    eager_overhead_ms: float = Field(0.0, ge=0, description="host cost of launching one step's kernels one by one "
                                     "(a decode step above the largest graph)")
    tp_step_overhead_ms: float = Field(0.0, ge=0, description=(  # sim.cost.parallel ParallelConfig.executor_step_s
        "host time per step of a multi-process executor when tp x pp > 1 (vLLM V1 MultiprocExecutor's IPC round "
        "trip); 0 = off (docs/cost-model.md 'Multi-process executor step')"))
    eager_prefill_moe_layer_us: float = Field(0.0, ge=0, description="host time per MoE layer of an eager prefill "
                                              "forward: prompt steps last >= n_moe_layers x it (sim.cost.eager_prefill)")
    eager_prefill_launch_us: float = Field(0.0, ge=0, description="host time per kernel launch of an eager prefill "
                                           "forward: prompt steps last >= its launches x it (sim.cost.eager_launches)")
    decode_kv_splits: int | None = Field(None, ge=1, description=(
        "decode attention that splits each sequence's keys over at most this many thread blocks per head block, "
        "each walking its keys serially (SGLang's triton backend: --triton-attention-num-kv-splits, 8): "
        "sim.cost.split_kv. None = a split-KV kernel that fills the GPU"))
    # when on, TP all-reduce by algorithm: {oneshot|custom[_blackwell]: {TP size: max message KiB}} (AllReducePolicy)
    allreduce_algorithms: bool = False
    allreduce_max_kib: dict[str, dict[int, float]] | None = None
    prefix_caching: bool = False
    efficiency_scale: EfficiencyScale = EfficiencyScale()
    kernel_family: str | None = Field(
        None,
        description=(
            "whose GPU kernels the engine runs: ggml (llama.cpp, Ollama), mlx, torch (vLLM, SGLang, TGI), "
            "trtllm. Hardware profiles carry efficiencies fitted to public measurements per family "
            "(calibrate/public_fit.py); None = the engine's own name"
        ),
    )
    backend: Literal["cuda", "metal", "vulkan", "rocm"] | None = Field(
        None,
        description=(
            "llama.cpp GPU backend (engines of the ggml kernel family): cuda, metal, vulkan or rocm (HIP). Vulkan "
            "and ROCm have their own kernels and their own fitted efficiencies (kernel families ggml-vulkan, "
            "ggml-rocm); None = the device's usual one (`default_backend`)"
        ),
    )
    tp: int = Field(1, ge=1, le=64, description="tensor-parallel degree: devices each layer is split across")
    pp: int = Field(1, ge=1, le=64, description="pipeline-parallel degree: stages the layers are split into")
    pipeline_overlap: Literal["microbatch", "none"] = Field("microbatch", description=(  # sim.cost.parallel
        "pp > 1: 'microbatch' = pp micro-batches in flight (vLLM, SGLang, TRT-LLM); 'none' = one pass at a time"))
    expert_parallel: bool = Field(
        False, description=("MoE models with tp > 1: routed experts placed whole on the tp ranks (E / tp each: "
                            "vLLM --enable-expert-parallel, SGLang --ep-size) instead of split across them; attention "
                            "stays tensor-parallel (sim.cost.parallel.expert_parallel_imbalance)"))
    gpu_layers: int | Literal["auto"] | None = Field(None, description=(
        "llama.cpp --n-gpu-layers: None = everything on the device, 'auto' = as many as fit"))
    offload_host: str = Field("cpu-x86-generic", description=(
        "hardware profile of the host that runs the layers not on the device"))
    speculative: SpeculativeSettings | None = None
    iteration_overhead_ms: float = Field(0.0, ge=0, description="software cost per iteration (scheduling, launch)")
    per_sequence_overhead_ms: float = Field(
        0.0, ge=0, description="software cost per sequence per iteration (sampling, detokenization)"
    )
    request_overhead_ms: float = Field(
        0.0, ge=0, description=("per-request front-end latency outside the GPU steps: the API server's HTTP "
                                "handling, chat template and tokenization before the queue, detokenizing and "
                                "streaming the first token (added to TTFT and E2E, not to TPOT; a closed-loop "
                                "client waits for it; workloads.arrivals.FrontEnd)"))
    hardware_rules: list[HardwareRule] = Field(default_factory=list)
    sources: list[EngineSource] = Field(default_factory=list)
    notes: str = ""

    @field_validator("gpu_layers", mode="before")
    @classmethod
    def _gpu_layers_number_or_auto(cls, v: Any) -> Any:
        """Accept an integer >= 0, its decimal text (a CLI value) or "auto"."""
        if v is None or v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
            return v
        if isinstance(v, str) and v.strip().isdigit():
            return int(v)
        raise ValueError(f"must be an integer >= 0 or 'auto', got {v!r}")

    @model_validator(mode="after")
    def _check(self) -> "EngineConfig":
        settable = set(type(self).model_fields) - {"name", "hardware_rules", "sources"}
        for i, rule in enumerate(self.hardware_rules):
            unknown = set(rule.set) - settable
            if unknown:
                raise ValueError(f"hardware_rules[{i}].set: unknown field(s) {', '.join(sorted(unknown))}")
        if self.backend is not None and (self.kernel_family or self.name) != "ggml":
            raise ValueError(f"backend '{self.backend}' is a llama.cpp backend; engine '{self.name}' runs "
                             f"{self.kernel_family or self.name} kernels")
        if self.gpu_layers is not None and (self.tp > 1 or self.pp > 1):
            raise ValueError("gpu_layers (partial offload) cannot be combined with tp or pp > 1")
        get_quant(self.default_quant)  # raises ConfigError naming the known formats
        kv_dtype_bytes(self.kv_dtype)
        for q, kv in self.kv_dtype_for_quant.items():
            get_quant(q)
            kv_dtype_bytes(kv)
        if self.cuda_graph_sizes is not None:
            if not self.cuda_graph_sizes or any(n < 1 for n in self.cuda_graph_sizes):
                raise ValueError("cuda_graph_sizes must be a non-empty list of batch sizes >= 1")
            if list(self.cuda_graph_sizes) != sorted(set(self.cuda_graph_sizes)):
                raise ValueError("cuda_graph_sizes must be increasing, without repeats")
        if (
            self.per_slot_context
            and self.context_mode == "split"
            and self.context_size is not None
            and self.context_size < self.max_num_seqs
        ):
            raise ValueError(
                f"context_size ({self.context_size}) must be at least max_num_seqs ({self.max_num_seqs}) "
                "for the slots scheduler: each slot owns context_size / max_num_seqs tokens"
            )
        return self

    def efficiency_family(self, hw) -> str:
        """The kernel family whose fitted efficiencies price this engine on `hw`: `kernel_family`,
        except that a ggml engine's is its llama.cpp backend's (`backend_family`): `backend`, else the
        device's usual one (`default_backend`). A backend the device cannot run is a one-line error."""
        family = self.kernel_family or self.name
        if family != "ggml":
            return family
        backend = self.backend or default_backend(hw)
        allowed = BACKEND_VENDORS.get(backend)
        if allowed is not None and hw.vendor not in allowed:
            raise ConfigError(f"llama.cpp backend '{backend}' does not run on {hw.name} ({hw.vendor or hw.kind}); "
                              f"this device runs: {', '.join(backends_for(hw))}", field="--llama-backend")
        return backend_family(backend)

    @property
    def per_slot_context(self) -> bool:
        """Whether the scheduler gives each of `max_num_seqs` slots its share of `context_size`
        (llama-server's slots: `context_mode` applies; `sim.catalog.policies.SchedulerPolicy`)."""
        return SCHEDULERS[self.scheduler].per_slot_context

    @cached_property
    def slot_context_tokens(self) -> int | None:
        """Most tokens (prompt + output) one request may hold under the `slots` scheduler:
        split -> context_size // max_num_seqs; unified and per_slot -> context_size.
        None when no context size is set (then the model's max context applies)."""
        if self.context_size is None:
            return None
        if self.context_mode == "split":
            return self.context_size // self.max_num_seqs
        return self.context_size

    @cached_property
    def total_context_tokens(self) -> int | None:
        """Tokens the server's KV buffer holds across all slots: context_size, or
        context_size x max_num_seqs for per_slot (Ollama); None when no context size is set."""
        if self.context_size is None:
            return None
        if self.context_mode == "per_slot":
            return self.context_size * self.max_num_seqs
        return self.context_size

    def context_limits(self, model_max_context: int, kv_capacity_tokens: int | None = None) -> tuple[int, int]:
        """(KV tokens the server holds for contexts, most tokens one request may hold).

        - The engine's context setting (`context_size`, else the model's max context); each request
          is capped at the model's trained context (llama-server caps slots to n_ctx_train, Ollama
          caps num_ctx).
        - `per_slot` (Ollama): the buffer holds max_num_seqs x context_size; `split`: context_size is
          shared evenly by the slots; `unified`: one request may use the whole buffer.
        - `fit_context_to_memory` with no explicit context_size: the buffer shrinks to the KV capacity
          (never below `min_fit_context`), as llama-server's --fit does.
        Non-slot engines: the per-request limit is the context setting (vLLM max_model_len) and the
        buffer is the KV capacity (or the context setting when the capacity is not given).
        """
        setting = self.context_size or model_max_context
        if not self.per_slot_context:
            per_request = min(setting, model_max_context)
            return (kv_capacity_tokens if kv_capacity_tokens is not None else per_request), per_request
        n = self.max_num_seqs
        # Ollama caps num_ctx at the model's trained context before giving each slot its share
        total = min(setting, model_max_context) * n if self.context_mode == "per_slot" else setting
        if self.fit_context_to_memory and self.context_size is None and kv_capacity_tokens is not None:
            total = min(total, max(kv_capacity_tokens, min(self.min_fit_context, total)))
        per_request = total // n if self.context_mode in ("split", "per_slot") else total
        return total, min(per_request, model_max_context)

    def for_hardware(self, hw: "HardwareProfile") -> "EngineConfig":
        """The engine's defaults on this device: every matching hardware rule applied in order.

        Call before `with_overrides`, so a user's explicit value wins over a device default.
        """
        changes: dict[str, Any] = {}
        for rule in self.hardware_rules:
            if rule.when.matches(hw):
                changes.update(rule.set)
                if rule.memory_reserved_gib is not None:
                    mem_gib = hw.memory_bytes / GIB
                    changes["memory_fraction"] = round(max(0.05, 1.0 - rule.memory_reserved_gib / mem_gib), 3)
        return self.with_overrides(**changes) if changes else self

    def for_checkpoint(self, model: "ModelSpec", quant: str) -> "EngineConfig":
        """The engine's defaults for this checkpoint: the KV dtype its `auto` picks for the
        quantization (`kv_dtype_for_quant`) and, for vLLM V0, chunked prefill only on long-context
        models (`chunked_prefill_min_context`). Call after `for_hardware` and before the user's
        overrides (an explicit --kv-dtype or --scheduler wins)."""
        changes: dict[str, Any] = {}
        kv = self.kv_dtype_for_quant.get(get_quant(quant).name) if self.kv_dtype_for_quant else None
        if kv is not None and kv != self.kv_dtype:
            changes["kv_dtype"] = kv
        limit = self.chunked_prefill_min_context
        if limit is not None and self.scheduler == "chunked" and model.max_context <= limit:
            # vLLM V0 SchedulerConfig: without chunked prefill the token budget is
            # max(max_model_len, _DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048)
            changes["scheduler"] = "continuous"
            changes["max_num_batched_tokens"] = max(self.context_size or model.max_context, 2048)
        return self.with_overrides(**changes) if changes else self

    def graph_batch(self, n: int) -> int | None:
        """The captured CUDA-graph batch size a decode step of n sequences runs as (the next captured
        size up, as vLLM's pad_for_cudagraph and SGLang's bisect over capture_bs do); None when n is
        above the largest captured size (or no graphs are modelled): the step runs eagerly."""
        sizes = self.cuda_graph_sizes
        if not sizes or n > sizes[-1]:
            return None
        import bisect

        g = sizes[bisect.bisect_left(sizes, n)]
        return g if self.cuda_graph_padding or g == n else None

    @property
    def forward_tokens(self) -> int | None:
        """Tokens of one forward pass, what activation buffers are sized for: the physical batch
        (`ubatch_tokens`: llama.cpp sizes its compute buffers for n_ubatch) when smaller than the
        token budget per iteration; None = neither set (the device's default budget applies)."""
        sizes = [n for n in (self.ubatch_tokens, self.max_num_batched_tokens) if n]
        return min(sizes) if sizes else None

    def with_overrides(self, **fields: Any) -> "EngineConfig":
        """A copy with some fields replaced; `None` values mean "keep the preset's value".

        Validated like a preset: an unknown field or a bad value raises `ConfigError` naming it.
        `efficiency_scale` may be given as a mapping with some of compute/bandwidth/attention.
        """
        changes = {k: v for k, v in fields.items() if v is not None}
        if not changes:
            return self
        data = self.model_dump()
        for key, value in changes.items():
            if key == "efficiency_scale" and isinstance(value, dict):
                data[key] = {**data[key], **value}
            else:
                data[key] = value
        try:
            return EngineConfig.model_validate(data)
        except ValidationError as e:
            err = pydantic_error_to_config_error(e)
            raise ConfigError(f"{err.problem} (overriding engine '{self.name}')", field=err.field) from None


# ---- finding and loading -------------------------------------------------------------------------

_PRESETS_DIR = Path(__file__).parent / "engines"


def available_engines() -> dict[str, Path]:
    """Preset name -> YAML file, for the presets shipped in `sim/catalog/engines/`."""
    return {p.stem: p for p in sorted(_PRESETS_DIR.glob("*.yaml"))}


def read_yaml(path: Path) -> dict:
    try:
        # libyaml's parser when pyyaml has it (same SafeLoader constructors and resolver, ~10x faster)
        data = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise ConfigError(f"invalid YAML: {getattr(e, 'problem', e)}", file=path, line=line) from None
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping of engine fields", file=path)
    return data


def engine_releases(name: str) -> tuple[str | None, dict[str, EngineRelease]]:
    """(default release, {release: its overrides}) of a shipped preset; (None, {}) without releases."""
    path = engine_path(split_release(name)[0])
    if path is None or not path.is_file():
        return None, {}
    data = read_yaml(path)
    rel = data.get("releases") or {}
    default = data.get("default_release")
    return (None if default is None else str(default)), {
        str(k): EngineRelease.model_validate(v or {}) for k, v in rel.items()}


def release_for_version(name: str, version: str) -> str | None:
    """The modelled release of preset `name` that stands for an engine version as printed
    ('0.10.1', 'v0.5.4.post1', '1.0.0rc4'): the release of that name, else the one whose `covers`
    range holds it; None when no release does (e.g. for a corpus row's engine_version)."""
    _, releases = engine_releases(name)
    if str(version) in releases:
        return str(version)
    return next((k for k, r in releases.items() if covers_version(r, version)), None)


def load_engine_file(path: str | Path, release: str | None = None) -> EngineConfig:
    """An engine from a YAML file; `base: NAME` (or `NAME@RELEASE`) starts from that preset and
    overrides its fields; a `releases:` section is resolved for `release` (None = its default)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("file not found", file=path, field="--engine")
    data = apply_release(read_yaml(path), path, release)
    base = data.pop("base", None)
    if base is not None:
        if not isinstance(base, str):
            raise ConfigError("base must be a preset name", file=path, line=line_of(path, "base"), field="base")
        merged = load_engine(base).model_dump()
        if isinstance(data.get("efficiency_scale"), dict):
            data["efficiency_scale"] = {**merged["efficiency_scale"], **data["efficiency_scale"]}
        merged.update(data)
        data = merged
    data.setdefault("name", path.stem)
    try:
        return EngineConfig.model_validate(data)
    except ValidationError as e:
        err = pydantic_error_to_config_error(e, file=path)
        if err.field and err.line is None:
            err = ConfigError(err.problem, file=path, line=line_of(path, err.field), field=err.field)
        raise err from None


def _names_a_file(s: str) -> bool:
    """An --engine value that is a path (ends in .yaml/.yml or has a separator), not a preset name."""
    return s.endswith((".yaml", ".yml")) or os.sep in s


def engine_path(name_or_path: str | Path) -> Path | None:
    """The file a preset name (or alias) or path names; None when there is none."""
    s = str(name_or_path)
    if _names_a_file(s):
        return Path(s)
    s = split_release(s)[0]
    return available_engines().get(_ALIASES.get(s.lower(), s.lower()))


def load_engine(name_or_path: str | Path) -> EngineConfig:
    """A shipped preset by name (or alias), or a YAML file by path."""
    s = str(name_or_path)
    if _names_a_file(s):
        return load_engine_file(s)
    presets = available_engines()
    s, release = split_release(s)
    key = _ALIASES.get(s.lower(), s.lower())
    if key in presets:
        if release == "":
            raise ConfigError(f"empty release in '{name_or_path}'; write NAME@RELEASE (e.g. vllm@0.7)", field="--engine")
        return load_engine_file(presets[key], release)
    names = list(presets) + list(_ALIASES)
    close = difflib.get_close_matches(s.lower(), names, n=4, cutoff=0.4)
    hint = f"; did you mean: {', '.join(close)}?" if close else f"; known: {', '.join(presets)}"
    raise ConfigError(f"unknown engine '{s}'{hint}", field="--engine")


# ---- llama.cpp backends ------------------------------------------------------------------------------

# Which vendors' GPUs each llama.cpp backend runs on (ggml/src/ggml-cuda, ggml-metal, ggml-vulkan; the
# ROCm/HIP build compiles ggml-cuda's kernels with hipcc for AMD GPUs). Vulkan runs on any GPU.
BACKEND_VENDORS: dict[str, tuple[str, ...] | None] = {
    "cuda": ("NVIDIA",), "metal": ("Apple",), "rocm": ("AMD",), "vulkan": None}


def backend_family(backend: str | None) -> str:
    """The kernel family of a llama.cpp backend: `ggml` for CUDA and Metal (the families the public fit
    has always called ggml: one per device, and no device runs both), `ggml-vulkan` and `ggml-rocm` for
    the backends with their own kernels (calibrate/public/params.py `engine_family`)."""
    return f"ggml-{backend}" if backend in ("vulkan", "rocm") else "ggml"


def base_family(family: str | None) -> str | None:
    """The family whose kernel classes and cost rules a (backend) family shares: ggml for ggml-vulkan
    and ggml-rocm (the same GGUF formats, priced by the same roofline), else itself."""
    return "ggml" if family and family.startswith("ggml-") else family


def default_backend(hw) -> str:
    """The llama.cpp backend people run on `hw` when they do not say: CUDA on NVIDIA, Metal on Apple;
    on AMD, ROCm/HIP on the Instinct (kind gpu) parts that ROCm supports first, Vulkan on the Ryzen AI
    APUs (kind unified-soc: llama.cpp's own Linux and Windows release builds for AMD are Vulkan ones, and
    on the Ryzen AI Max+ 395 RADV Vulkan decodes faster than ROCm 7.2.3 for each of the three models of
    kyuz0's toolbox logs, 55.73 / 79.78 / 56.61 against 50.59 / 73.05 / 51.81 tokens/s:
    benchmarks/public/new_devices.csv); CPU otherwise."""
    vendor = getattr(hw, "vendor", "")
    if vendor == "NVIDIA":
        return "cuda"
    if vendor == "Apple":
        return "metal"
    if vendor == "AMD":
        return "rocm" if hw.kind == "gpu" else "vulkan"
    return "cpu"


def backends_for(hw) -> list[str]:
    """The llama.cpp GPU backends `hw` can run (BACKEND_VENDORS)."""
    return [b for b, vendors in BACKEND_VENDORS.items() if vendors is None or getattr(hw, "vendor", "") in vendors]


@lru_cache(maxsize=None)
def kernel_family_of(engine: str) -> str:
    """Whose kernels a shipped engine runs: its preset's `kernel_family` (the one map from engine to
    family), else its name; a name that is no preset (a corpus row's engine we do not model) is its
    own family."""
    path = engine_path(engine)
    if path is None or _names_a_file(str(engine)):
        return engine
    eng = load_engine(engine)
    return eng.kernel_family or eng.name
