"""Building one replica from a deployment's description, and its results (`SimResult`).

`replica_parts` / `build_replica` wire the pieces together — cost model (`sim.cost`), KV capacity (`sim.cost.memory`), allocator
(`sim.engine.kv`), scheduler (`sim.engine.schedulers`) and the SimPy replica (`sim.engine.replica`) — and summarises the
run with `sim.engine.metrics`. Deterministic: nothing in a run is random, so the same inputs give
byte-identical summaries (the seed is recorded for tools that generate traces).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sim.catalog.accuracy import expected_error
from sim.catalog.engine_config import EngineConfig
from sim.catalog.hardware import HardwareProfile
from sim.catalog.models import ModelSpec
from sim.cost.memory import (
    activation_peak_bytes,
    engine_activation_bytes,
    check_parallel_fit,
    default_max_batched_tokens,
    deployment_kv_capacity_tokens,
    engine_memory_fraction,
    memory_budget_bytes,
    resolve_gpu_layers,
)
from sim.cost.params import CostParams
from sim.cost.eager_prefill import with_eager_prefill
from sim.cost.passes import make_step_model
from sim.cost.speculative import make_cost_model
from sim.engine.host import with_host_stage
from sim.engine.kv import ALLOCATORS, make_allocator
from sim.engine.metrics import GapLog, IterationLog, RequestLog, summarize
from sim.engine.prefix_cache import BlockPrefixCache, SlotPromptCache
from sim.engine.replica import Replica
from sim.engine.schedulers import make_scheduler
from sim.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd
    import simpy


class SimResult:
    """`summary`: the `infersim run --json` contract; `requests`: the requests.csv table;
    `iterations`: one row per engine event (a fast-forwarded decode run is one row).

    The tables may be given as functions that build them: they run on first access, so a run
    that only reports its summary never builds them (nor imports pandas)."""

    __slots__ = ("summary", "_requests", "_iterations", "extra")

    def __init__(self, summary: dict, requests: pd.DataFrame | Callable[[], pd.DataFrame],
                 iterations: pd.DataFrame | Callable[[], pd.DataFrame], extra: dict | None = None) -> None:
        self.summary = summary
        self._requests = requests
        self._iterations = iterations
        self.extra = {} if extra is None else extra

    @property
    def requests(self) -> pd.DataFrame:
        if callable(self._requests):
            self._requests = self._requests()
        return self._requests

    @property
    def iterations(self) -> pd.DataFrame:
        if callable(self._iterations):
            self._iterations = self._iterations()
        return self._iterations

    def __repr__(self) -> str:
        return f"SimResult(summary={self.summary!r}, extra={self.extra!r})"

    def to_json(self) -> str:
        """The summary as JSON text (stable key order, so equal runs give equal bytes)."""
        return json.dumps(self.summary, indent=2)


@dataclass(frozen=True)
class KVPlan:
    """How big the KV cache is and why."""

    capacity_tokens: int
    memory_budget_bytes: float
    weight_bytes: float
    activation_reserve_bytes: float
    kv_bytes_per_token: float


def plan_kv(hw: HardwareProfile, model: ModelSpec, quant: str, engine: EngineConfig,
            extra_weight_bytes: float = 0.0) -> KVPlan:
    """KV capacity = (device memory x engine memory fraction - weights - activation reserve) / KV bytes per token.

    The activation reserve is the larger of the engine's stated share of its memory
    (`activation_reserve_fraction`: workspace, CUDA graphs, allocator slack) and the peak
    activation of one forward pass (`EngineConfig.forward_tokens`: `max_num_batched_tokens`, or
    `ubatch_tokens` when smaller; `sim.cost.memory.activation_peak_bytes`,
    what vLLM's profiling run measures). llama-server and Ollama (`slots`) allocate their context
    buffer (`EngineConfig.context_limits`) at start-up, so their capacity is that, provided it fits.

    With `tp`/`pp`, partial offload (`gpu_layers`) or a draft model (`extra_weight_bytes`, its
    weights), the capacity is the deployment's, all devices together
    (`sim.cost.memory.deployment_kv_capacity_tokens`: the most-loaded device decides); a deployment
    whose weights do not fit fails with `check_parallel_fit`'s message naming the device.
    """
    weights = model.weight_bytes(quant)
    tokens = engine.forward_tokens or default_max_batched_tokens(hw)
    activations = activation_peak_bytes(model, tokens)
    if engine.memory_fraction_of == "free":
        # TensorRT-LLM: the fraction is of the memory left free; its activations (its engine graph's,
        # `engine_activation_bytes`) are in that rule
        activations = engine_activation_bytes(hw, model, engine)
        engine = engine.with_overrides(memory_fraction=engine_memory_fraction(hw, model, quant, engine),
                                       activation_reserve_fraction=0.0)
    budget = memory_budget_bytes(hw, engine.memory_fraction)
    # hybrid models: the recurrent layers' fixed state of every sequence the engine may run is allocated
    # beside the KV cache (vLLM sizes its Mamba-state pool by max_num_seqs); 0 for attention-only models.
    # The reserve is per device: tensor parallelism splits the state by heads (vLLM's Gated DeltaNet, KDA
    # and Mamba mixers hold num_heads / tp heads per rank) and pipeline parallelism by layers
    state = model.state_bytes_per_sequence(engine.kv_dtype) * engine.max_num_seqs / (engine.tp * engine.pp)
    reserve = max(activations, engine.activation_reserve_fraction * budget) + state
    per_token = model.kv_bytes_per_token(engine.kv_dtype)
    placed = engine.tp * engine.pp > 1 or engine.gpu_layers is not None
    if not placed and weights + extra_weight_bytes >= budget:
        draft = f" + {extra_weight_bytes / 1e9:.1f} GB of draft model" if extra_weight_bytes else ""
        raise ConfigError(
            f"{model.name} in {quant} needs {weights / 1e9:.1f} GB of weights{draft} but {engine.name} may use "
            f"{budget / 1e9:.1f} GB of {hw.name} ({engine.memory_fraction:g} x {hw.memory_capacity_gb:.1f} GB)",
            field="--model")
    capacity = deployment_kv_capacity_tokens(hw, model, quant, engine, reserve, extra_weight_bytes)
    if capacity <= 0 and engine.tp * engine.pp > 1:
        check_parallel_fit(hw, model, quant, engine.kv_dtype, 1, engine.tp, engine.pp, engine.memory_fraction,
                           reserve + extra_weight_bytes / engine.tp)
    if engine.per_slot_context:
        buffer, _ = engine.context_limits(model.max_context, capacity)
        if buffer > capacity:
            raise ConfigError(
                f"llama-server would allocate {buffer} KV tokens ({buffer * per_token / 1e9:.1f} GB) but only "
                f"{capacity} fit next to the weights on {hw.name}; lower context_size", field="context_size")
        capacity = buffer
    if capacity <= 0:
        where = f" with gpu_layers={engine.gpu_layers}" if engine.gpu_layers is not None else ""
        raise ConfigError(
            f"no memory left for the KV cache{where}: {budget / 1e9:.1f} GB budget - {weights / 1e9:.1f} GB weights "
            f"- {reserve / 1e9:.1f} GB activation reserve", field="--mem-fraction")
    return KVPlan(capacity, budget, weights, reserve, per_token)


def deployment_config(hw: HardwareProfile, model: ModelSpec, quant: str, engine: EngineConfig, cost) -> dict:
    """The resolved parallelism, offload and speculative settings for `summary["config"]`:
    `tp`, `pp`, `gpu_layers` (the number of llama.cpp `-ngl` layers; n_layers + 1 = all on the
    device), `speculative` (the settings, or None) and `spec_tokens_per_step` (expected tokens a
    verify step emits per sequence; 1.0 without speculative decoding)."""
    return {
        "tp": engine.tp,
        "pp": engine.pp,
        "gpu_layers": resolve_gpu_layers(hw, model, quant, engine),
        "speculative": engine.speculative.model_dump() if engine.speculative is not None else None,
        "spec_tokens_per_step": float(cost.tokens_per_step),
    }


def make_prefix_cache(engine: EngineConfig, kv):
    """The engine's prefix cache (`sim.engine.prefix_cache`), None when `prefix_caching` is off: shared
    blocks for a paged allocator (attached to it, its memory is the KV cache's), the slots' last
    prompts for a contiguous one."""
    if not engine.prefix_caching:
        return None
    if kv.block_granular:  # shared whole blocks
        kv.prefix = BlockPrefixCache(kv.block_size)
        return kv.prefix
    return SlotPromptCache(engine.max_num_seqs)


def prefix_summary(prefix) -> dict:
    """`summary["prefix_cache"]`: hit rate in tokens (hit / queried prompt tokens, each admission
    a lookup), counts, and the blocks still cached at the end (block caches)."""
    if prefix is None:
        return {"enabled": False}
    out = prefix.stats.summary(prefix.kind)
    if prefix.kind == "blocks":
        out["cached_blocks_at_end"] = prefix.cached_blocks
    return out


class LoneClock:
    """The simpy environment of a lone replica, without the event queue (issue 17: a tenth of a
    large run's time went to simpy's scheduling). Its one process only ever waits for a timeout,
    so the clock simply advances by each delay in turn, with the same float sum simpy's queue
    makes (`now + delay`), so results are identical to running it under `simpy.Environment`.
    Several replicas sharing a clock (`sim.cluster`, `sim.cluster.disagg`) still run under simpy."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = 0  # simpy.Environment's initial_time

    def timeout(self, delay):
        if delay < 0:
            raise ValueError(f"Negative delay {delay}")  # simpy.Timeout's check
        return delay

    def run(self, process) -> None:
        """Drive `process` (a generator yielding the delays `timeout` returned) to its end."""
        for delay in process:
            self.now = self.now + delay


@dataclass(frozen=True)
class ReplicaParts:
    """What every replica of one engine deployment shares: the resolved names, cost model and KV
    plan (validated once), from which `build_replica` makes replicas with their own state."""

    hw: HardwareProfile
    model: ModelSpec
    quant: object  # QuantFormat
    engine: EngineConfig
    params: CostParams
    cost: object  # CostModel | SpeculativeCostModel
    kvp: KVPlan
    context_tokens: int

    def make_scheduler(self):
        e = self.engine
        return make_scheduler(e.scheduler, max_num_seqs=e.max_num_seqs, max_num_batched_tokens=e.max_num_batched_tokens,
                              context_tokens=self.context_tokens, shared_slots=e.context_mode == "unified",
                              new_token_ratio=e.new_token_ratio, watermark=e.admission_watermark,
                              batch_wait=(e.batch_wait_iters, e.batch_wait_tokens_ratio))

    def config(self, *, concurrency=None, seed=0, config_extra=None) -> dict:
        """`summary["config"]`: everything the run resolved to."""
        engine, hw, q = self.engine, self.hw, self.quant
        block = engine.block_size if ALLOCATORS[engine.kv_allocator].block_granular else 1
        return {
            "hw": hw.name,
            "model": self.model.name,
            "quant": q.name,
            "kv_dtype": engine.kv_dtype,
            "engine": engine.name,
            "engine_version": engine.version,
            "scheduler": engine.scheduler,
            "kv_allocator": engine.kv_allocator,
            "max_num_seqs": engine.max_num_seqs,
            "max_num_batched_tokens": engine.max_num_batched_tokens,
            "block_size": block,
            "memory_fraction": engine.memory_fraction,
            "context_tokens": self.context_tokens,
            "context_mode": engine.context_mode if engine.per_slot_context else None,
            "per_sequence_kv_streams": engine.per_sequence_kv_streams,
            "ubatch_tokens": engine.ubatch_tokens,
            "flash_attention": engine.flash_attention_for(self.model),
            "concurrency": concurrency,
            "seed": seed,
            "weight_bytes": self.kvp.weight_bytes,
            "activation_reserve_bytes": self.kvp.activation_reserve_bytes,
            "kv_bytes_per_token": self.kvp.kv_bytes_per_token,
            "cost_params": {k: getattr(self.params, k) for k in CostParams.FIELDS},
            # the calibration's measured decode-step correction, when this model and engine are the ones it measured
            "decode_correction": (lambda c: c.to_dict() if c is not None else None)(self.cost.decode_correction),
            **deployment_config(hw, self.model, q.name, engine, self.cost),
            # how far public measurements fell from held-out predictions of this device and engine family
            "expected_error": expected_error(hw, engine, concurrency=concurrency),
            **(config_extra or {}),
        }


def replica_parts(hw: HardwareProfile, model: ModelSpec, quant: str | None, engine: EngineConfig,
                  cost_params: CostParams | None = None) -> ReplicaParts:
    """Resolve and validate one engine deployment (cost model, KV plan, context limit). The model's
    weights are the ones the engine loads (`ModelSpec.as_loaded_by`: GGUF file sizes for the llama.cpp
    family, the released checkpoint's bytes for the others), for its memory plan as for its timing."""
    model = model.as_loaded_by(engine.kernel_family)
    q = model.quant(quant or engine.default_quant)
    params = cost_params or CostParams.from_profile(hw, q, engine, model.is_moe)
    cost = make_cost_model(hw, model, q, engine, params=params)
    kvp = plan_kv(hw, model, q.name, engine, cost.extra_weight_bytes)
    _, context_tokens = engine.context_limits(model.max_context, kvp.capacity_tokens)
    parts = ReplicaParts(hw, model, q, engine, params, cost, kvp, context_tokens)
    parts.make_scheduler()  # a bad scheduler setting fails here, before any replica runs
    return parts


def build_replica(env: simpy.Environment | LoneClock, parts: ReplicaParts, source, *, record_iterations: bool = True,
                  fast_forward: bool = True, check_invariants: bool = False, step_model=None,
                  front_end: bool = True) -> Replica:
    """A replica with its own scheduler, KV cache, prefix cache and logs. Its batches are priced by
    `step_model` (any `sim.engine.pricing.StepModel`), by default the deployment's cost model as the
    engine runs it (`sim.cost.passes.make_step_model`: llama.cpp's passes where the engine splits batches).
    With the engine's `request_overhead_ms` > 0 (and `front_end`: not a disaggregated decode pool, whose
    requests come from the prefill pool), requests reach it through the API server's delay
    (`workloads.arrivals.FrontEnd`), and with `front_request_ms` > 0 through its serialized per-request work."""
    engine = parts.engine
    if front_end and (engine.request_overhead_ms > 0 or engine.front_request_ms > 0):
        from workloads.arrivals import FrontEnd

        source = FrontEnd.of_engine(source, engine)
    kv = make_allocator(engine.kv_allocator, parts.kvp.capacity_tokens, engine.block_size)
    scheduler = parts.make_scheduler()
    if step_model is None:
        step_model = make_step_model(parts.cost, engine, scheduler.max_seqs)
        # an eager prefill's host launch time (engine.eager_prefill_moe_layer_us / eager_prefill_launch_us; 0 = none):
        # sim.cost.eager_prefill
        step_model = with_eager_prefill(step_model, parts.model, engine, parts.quant, parts.hw)
    # the host stage every streamed token passes through (engine.host_token_us / host_request_us; 0 = none)
    step_model, host = with_host_stage(step_model, engine, getattr(parts.cost, "tokens_per_step", 1.0))
    return Replica(env, step_model=step_model, scheduler=scheduler, kv=kv, source=source, log=RequestLog(),
                   gaps=GapLog(), iterations=IterationLog(enabled=record_iterations), fast_forward=fast_forward,
                   check_invariants=check_invariants, prefix=make_prefix_cache(engine, kv), host=host,
                   recv_interval=engine.recv_interval_steps)  # SGLang --scheduler-recv-interval: sim.engine.recv


def check_drained(replica: Replica) -> None:
    """KV conservation at the end of a run: every block free (cached unreferenced ones count as free)."""
    replica.kv.check()
    if replica.kv.free_blocks != replica.kv.total_blocks:
        raise AssertionError("KV blocks still allocated at the end of the run")


def replica_summary(config: dict, replica: Replica) -> dict:
    """The JSON contract for one replica's run."""
    summary = summarize(
        config, replica.log, replica.gaps, kv_capacity_tokens=replica.kv.capacity_tokens,
        peak_used_tokens=replica.peak_used_tokens, peak_reserved_tokens=replica.peak_reserved_tokens,
        preemptions=replica.state.preemptions, batch_steps=replica.batch_steps,
        batch_seq_steps=replica.batch_seq_steps, batch_max=replica.batch_max,
    )
    summary["prefix_cache"] = prefix_summary(replica.state.prefix)
    return summary
