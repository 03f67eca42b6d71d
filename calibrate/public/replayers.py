"""One replayer per benchmark kind, in a registry: a corpus row -> the iterations its engine ran.

`row_shape` looks the row's metric up in `REPLAYERS` (llama-bench pp and tg, llama-batched-bench
and vLLM/SGLang latency runs, offline throughput, serving at a concurrency); a metric without a
replayer, or a row a replayer cannot follow, raises `Excluded` with the reason. `prepare` does that
for every row and keeps the reason of each row not replayed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from calibrate.public.corpus import PublicCorpus
from calibrate.public.params import engine_family
from calibrate.public.replay import (
    Excluded,
    Shape,
    _comm,
    row_allreduce_algorithms,
    _decode_steps,
    _kv_capacity,
    _pack,
    _prefill_passes,
    _pytorch_flow,
    _row_kv_dtype,
    _row_objects,
    _steady_iteration,
    _ubatch,
)
from calibrate.public_corpus import PublicRow
from sim.cost.memory import GiB


# ---- trtllm-bench's engine limits ---------------------------------------------------------------------


def trtllm_bench_limits(row: PublicRow, hw, spec) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) that `trtllm-bench` picks for a row's ISL/OSL when the run does
    not name them: the TensorRT-LLM perf-overview tables build engines with `trtllm-bench build
    --dataset` (v0.13: NVIDIA/TensorRT-LLM@v0.13.0 docs/source/performance/perf-overview.md,
    "Commands"), and the PyTorch-backend `trtllm-bench throughput` of v1.0 takes the same settings
    from `get_settings` (tensorrt_llm/bench/build/build.py: `calc_engine_setting` for FP8 and
    unquantized models). `calc_engine_setting` (tensorrt_llm/bench/build/tuning.py):

        bytes/elem    = 1 (FP8) or 2; KV bytes/elem = 1 (FP8 KV cache) or 2
        bytes/token   = 2 x layers x max(tp, kv_heads) x head_size x KV bytes/elem      [GiB]
        engine size   = params / 1e9 x bytes/elem
        KV memory     = (GPU memory [GiB, NVML] x GPUs - engine size) x 0.95
        max requests  = KV memory / bytes/token / (ISL + OSL)

    and `finetune_setting`: raw_bs = min(max requests, 4096); raw_tokens = min(raw_bs x (1 + ISL/OSL),
    32768); max_batch_size = max(64, 32-multiple ceiling) below 256, 128-multiple below 1024, else a
    256-multiple; max_num_tokens = max(2048, 256-multiple ceiling) below 4096, 512-multiple below
    8192, else a 1024-multiple. The KV bytes/elem are those of the KV cache the row ran with
    (`_row_kv_dtype`): the PyTorch flow takes them from the checkpoint (get_settings ->
    validate_and_set_kv_cache_quant with kv_cache_dtype "auto": a ModelOpt FP8 checkpoint's
    kv_cache_quant_algo is FP8), as the replay's KV pool does. GPU memory is the profile's (NVML reports a little less: 79.6 GiB
    for an H100 80GB, 45 GiB for an L40S, which the profiles quote as 80 and 48)."""
    # tuning.py's BYTES_PER_ELEM: NO_QUANT 2.0, FP8 1.0, NVFP4 0.5 (weights; the KV cache's likewise)
    bpe = {"fp8": 1.0, "nvfp4": 0.5}.get(row.quant, 2.0)
    bkv = 1.0 if _row_kv_dtype(row) == "fp8" else 2.0
    tp = max(row.n_devices, 1)
    per_token = 2 * spec.n_layers * max(tp, spec.n_kv_heads) * spec.d_head * bkv / GiB
    engine = spec.n_params_total / 1e9 * bpe
    free = hw.memory_bytes / GiB * tp - engine
    isl, osl = row.input_tokens, row.output_tokens
    requests = max(free * 0.95 / per_token / (isl + osl), 1.0)
    raw_bs = min(requests, 4096)
    raw_tok = min(raw_bs * (1 + isl / osl), 32768)
    bs = _tiered_ceiling(raw_bs, 64, ((256, 32), (1024, 128)), 256)
    tok = _tiered_ceiling(raw_tok, 2048, ((4096, 256), (8192, 512)), 1024)
    if _pytorch_flow(row):
        # the PyTorch flow's get_settings runs without chunked prefill (enable_chunked_prefill defaults to
        # False) and then raises max_num_tokens to at least the longest prompt + max_batch_size
        tok = max(tok, isl + bs)
    return bs, tok


def _tiered_ceiling(x: float, least: int, tiers: tuple[tuple[int, int], ...], last: int) -> int:
    """`finetune_setting`'s rounding: x rounded up to a multiple of the step of the first tier whose
    bound it is below (`last` above them all), at least `least` (which only the first tier can undercut)."""
    step = next((s for bound, s in tiers if x < bound), last)
    return max(least, step * math.ceil(x / step))


# ---- the replayers --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RowContext:
    """What a replayer works from: the row, the objects it is replayed with (`_row_objects`: profile,
    engine preset, model, format, CostModel) and its TP group's all-reduce costs (`_comm`)."""

    row: PublicRow
    hw: Any
    eng: Any
    spec: Any
    q: Any
    cm: Any
    comm: Any  # tokens -> (seconds not scaled by the hop latency, hops), or None (`_comm`)

    def shape(self, items, numerator: float = 0.0, scale: float = 0.0) -> Shape:
        """A Shape of iterations [(StepFeatures, how often)]: value = numerator / T, or T x scale."""
        f, w = _pack(items)
        if self.comm is None:
            return Shape(f, w, numerator, scale, self.row.n_devices)
        fixed, hops = self.comm(np.asarray(f.new_tokens, dtype=float))
        return Shape(f, w, numerator, scale, self.row.n_devices, comm_steps=hops, comm_fixed_s=fixed)


# corpus `metric` -> the replayer of that kind of benchmark (`replayer` registers one)
REPLAYERS: dict[str, Callable[[RowContext], Shape]] = {}


def replayer(*metrics: str):
    """Register the decorated function as the replayer of rows of these `metric`s."""
    def put(fn: Callable[[RowContext], Shape]) -> Callable[[RowContext], Shape]:
        for m in metrics:
            REPLAYERS[m] = fn
        return fn
    return put


def row_shape(row: PublicRow, corpus: PublicCorpus | None = None) -> Shape:
    """The iterations behind one corpus row (raises Excluded with a reason when it cannot be replayed):
    the replayer of its metric (`REPLAYERS`) applied to the objects it is replayed with (`corpus`: whose
    fitted routing skew)."""
    from sim.errors import ConfigError

    try:
        hw, eng, spec, q, cm = _row_objects(row, corpus=corpus)
    except ConfigError as e:
        raise Excluded(f"cannot build the engine/model: {e.problem}") from None
    # the all-reduce algorithms of the row's own engine release (`row_allreduce_algorithms`), the rest of
    # the preset as before
    comm = _comm(hw, spec, row.n_devices, eng.with_overrides(allreduce_algorithms=row_allreduce_algorithms(row))
                 if row.n_devices > 1 else eng)
    if row.engine in ("llama.cpp", "ollama", "lmstudio") and row.n_devices > 1:
        raise Excluded("llama.cpp over several GPUs splits layers (pipeline), not tensor parallel")
    replay = REPLAYERS.get(row.metric)
    if replay is None:
        raise Excluded(f"metric {row.metric} not replayed")
    return replay(RowContext(row, hw, eng, spec, q, cm, comm))


@replayer("pp")
def replay_prompt(c: RowContext) -> Shape:
    """llama-bench pp<N> (and MLX's prompt figure): one prompt of N tokens after `depth` cached ones, in
    physical batches of the row's -ub; value = N / T."""
    row = c.row
    if not row.input_tokens:
        raise Excluded("no prompt length")
    return c.shape(_prefill_passes(c.cm, 1, row.input_tokens, row.depth, _ubatch(row, c.eng)),
                   numerator=row.input_tokens)


@replayer("tg")
def replay_generation(c: RowContext) -> Shape:
    """llama-bench tg<N> (and MLX's generation figure): N single-sequence decode steps from the row's
    depth (+ prompt); value = N / T."""
    row = c.row
    osl = row.output_tokens
    if not osl:
        raise Excluded("no generated-token count")
    return c.shape(_decode_steps(c.cm, 1, row.depth + (row.input_tokens or 0), osl), numerator=osl)


@replayer("batched")
def replay_batched(c: RowContext) -> Shape:
    """A batch of b identical sequences started together: llama-batched-bench's S_PP / S_TG columns and
    vLLM / SGLang latency runs (benchmark_latency: the whole batch's end-to-end time)."""
    row, cm, quantity = c.row, c.cm, c.row.quantity
    b, isl, osl, depth = row.batch, row.input_tokens, row.output_tokens, row.depth
    if not (b and isl and osl):
        raise Excluded("batched row without batch, prompt and output lengths")
    if quantity == "prompt_tps":
        return c.shape(_prefill_passes(cm, b, isl, depth, _ubatch(row, c.eng)), numerator=b * isl)
    if quantity in ("decode_tps", "decode_tps_per_user"):
        return c.shape(_decode_steps(cm, b, depth + isl, osl), numerator=b * osl if quantity == "decode_tps" else osl)
    if quantity == "e2e_s":
        # one prefill of the whole batch (chunked at the engine's token budget), then osl - 1 decode
        # steps: the first output token comes from the prefill (vLLM benchmark_latency)
        items = _prefill_passes(cm, b, isl, depth, max(_ubatch(row, c.eng), isl))
        items += _decode_steps(cm, b, depth + isl, max(osl - 1, 1))
        return c.shape(items, scale=1.0)
    raise Excluded(f"batched {quantity} not replayed")


@replayer("offline")
def replay_offline(c: RowContext) -> Shape:
    """An offline throughput run of identical requests (trtllm-bench throughput, vLLM's offline
    benchmark): the engine kept full at its batch limit (for trtllm-bench without a stated batch, the
    limits it builds the engine with, `trtllm_bench_limits`), never more requests at once than the
    run sent (trtllm-bench's num_requests; TensorRT-LLM perf overview: 1,500 requests at 128/4096
    against max batch sizes of up to 4,096)."""
    row = c.row
    _steady_lengths(row)
    eng = c.eng
    budget = eng.max_num_batched_tokens or 10**9
    max_seqs = eng.max_num_seqs
    if row.engine == "trtllm" and not row.batch:
        max_seqs, budget = trtllm_bench_limits(row, c.hw, c.spec)
        # the engine trtllm-bench built: its activations (and so its KV pool) are sized by these limits
        eng = eng.with_overrides(max_num_seqs=max_seqs, max_num_batched_tokens=budget)
    b = _steady_batch(c, eng, budget, min(row.batch or max_seqs, max_seqs), row.setting_int("num_requests"))
    return _steady_figure(c, b)


@replayer("serving")
def replay_serving(c: RowContext) -> Shape:
    """A serving benchmark at a fixed concurrency (vllm bench serve --max-concurrency, SGLang's
    bench_serving): the engine kept full at the row's concurrency, as far as its memory and token
    budget allow. A run at a request rate is not replayed."""
    row = c.row
    _steady_lengths(row)
    if row.request_rate:
        raise Excluded("serving at a request rate is not replayed (its queueing is the simulator's, "
                       "not one steady iteration's)")
    eng = c.eng
    b = _steady_batch(c, eng, eng.max_num_batched_tokens or 10**9, min(row.batch or eng.max_num_seqs, 10**9), None)
    return _steady_figure(c, b)


def _steady_lengths(row: PublicRow) -> None:
    """The checks of a steady-state row (offline or serving): fixed lengths, an ITL that is one token's."""
    if not (row.input_tokens and row.output_tokens):
        raise Excluded("no fixed prompt/output lengths (a dataset's own lengths cannot be replayed)")
    if row.quantity == "itl_ms" and (row.setting_int("--num-scheduler-steps", "num_scheduler_steps") or 1) > 1:
        raise Excluded("ITL of a multi-step scheduler is the gap between bursts of tokens")


def _steady_batch(c: RowContext, eng, budget: int, limit: int, n_req: int | None) -> float:
    """Sequences an engine holds at steady state: at most `limit` (the run's batch or concurrency) and
    `n_req` (the run's requests), and what its KV pool (`_kv_capacity`) and token budget allow."""
    isl, osl = c.row.input_tokens, c.row.output_tokens
    cap = _kv_capacity(c.hw, c.spec, c.q, eng)
    # a paged engine's sequence holds isl + osl/2 tokens on average over its life (blocks are taken
    # as it grows); a contiguous one (TRT-LLM's GUARANTEED_NO_EVICT) reserves isl + osl at admission,
    # as the simulator's allocators do
    from sim.engine.kv import ALLOCATORS

    per_seq = isl + osl / 2 if ALLOCATORS[eng.kv_allocator].grows_on_decode else isl + osl
    b_mem = cap / per_seq if per_seq else limit
    b_budget = budget * osl / (isl + osl)
    return max(1.0, min(limit, b_mem, b_budget, n_req or 10**9))


def _steady_figure(c: RowContext, b: float) -> Shape:
    """The row's quantity from the average iteration of an engine kept full at `b` sequences."""
    row, cm, quantity = c.row, c.cm, c.row.quantity
    isl, osl = row.input_tokens, row.output_tokens
    it = _steady_iteration(cm, b, isl, osl)
    if quantity == "output_tps":
        return c.shape([(it, 1.0)], numerator=b)
    if quantity == "total_tps":
        return c.shape([(it, 1.0)], numerator=b * (isl + osl) / osl)
    if quantity in ("tpot_ms", "itl_ms"):
        return c.shape([(it, 1.0)], scale=1e3)
    if quantity == "decode_tps_per_user":
        return c.shape([(it, 1.0)], numerator=1.0)
    first = cm.features(prefill_tokens=[isl], prefill_context=[0], decode_context=[isl + osl // 2] * int(b - 1))
    if quantity == "ttft_ms":
        return c.shape([(first, 1.0)], scale=1e3)
    if quantity == "e2e_s":
        return c.shape([(first, 1.0), (it, osl - 1)], scale=1.0)
    raise Excluded(f"{row.metric} {quantity} not replayed")


@dataclass
class Prepared:
    """A row with its shape (or the reason it is excluded)."""

    row: PublicRow
    family: str
    shape: Shape | None
    excluded: str = ""


# A corpus row whose `notes` contain this (e.g. "treat as a low outlier") is not fitted.
OUTLIER_MARK = "outlier"
# A row whose `notes` contain "Set aside: <why>." is kept in the corpus and listed in the report with
# that reason, but not fitted: a measurement the cost model cannot yet follow without distorting the
# fits users' predictions come from (docs/public-calibration.md, rounds 10 and 14).
SET_ASIDE_MARK = "set aside:"


def prepare(rows: list[PublicRow], corpus: PublicCorpus | None = None) -> list[Prepared]:
    """Every row with its shape (`row_shape`, replayed with `corpus`'s fitted routing skew), or the reason
    it is not fitted: set aside or marked an outlier in its notes, or not replayable."""
    out = []
    for r in rows:
        fam = engine_family(r.engine, r.settings, r.backend)
        notes = r.extra.get("notes", "")
        if SET_ASIDE_MARK in notes.lower():
            why = notes[notes.lower().index(SET_ASIDE_MARK) + len(SET_ASIDE_MARK):].strip().split(". ")[0].rstrip(".")
            out.append(Prepared(r, fam, None, f"set aside: {why}"))
            continue
        if OUTLIER_MARK in notes.lower():
            # kept in the corpus (someone measured it) but not fitted: its collector judged the setup
            # unrepresentative (a misconfigured run reported as a bug, say) and said so in `notes`
            out.append(Prepared(r, fam, None, "its notes mark it as an outlier (not a representative setup)"))
            continue
        try:
            out.append(Prepared(r, fam, row_shape(r, corpus)))
        except Excluded as e:
            out.append(Prepared(r, fam, None, str(e)))
    return out
