"""Serve a trace in process with llama.cpp and continuous batching: a server without the server.

The driver is a small llama-server: `n_seq_max` sequences share one llama.cpp context, each with
its own KV stream (`seq_id`). Every iteration it

1. admits ready requests while a sequence slot is free (FIFO, into the lowest free `seq_id`, as
   llama-server picks its first idle slot; the request's prompt + output must fit the slot's
   context, else it is rejected up front with the reason),
2. builds one `llama_batch`: one token for every sequence that is decoding, in slot (`seq_id`) order,
   then prompt chunks of admitted sequences in admission order, until the batch holds `n_batch` tokens
   (llama-server's order: decodes first, prompts fill the rest — the simulator's `chunked`
   scheduler). With one KV stream per sequence llama.cpp runs the decodes and the prompt chunks of
   such a batch as separate ubatches (passes over the weights: `sim.cost.llamacpp`), and decodes whose seq_ids are not
   contiguous (slot 1 finished, 0 and 2 still decoding) as one pass per contiguous run; `validate`
   simulates both with the engine setting `per_sequence_kv_streams`,
3. runs `llama_decode` on it (`n_ubatch = n_batch`: one call is one iteration, and a decode-only
   iteration is one pass over the weights),
4. samples a token for every sequence that produced logits with llama-server's default sampler
   chain (top-k 40, top-p 0.95, min-p 0.05, temperature 0.8 — the chain the calibration probes
   time, so the per-sequence sampling cost is the one the profile was fitted with) and detokenizes
   it, stamps the token time, and frees a sequence's KV (`llama_memory_seq_rm`) as soon as it has
   its requested number of tokens.

Output lengths are forced: a sequence stops at the trace's `output_tokens`, whatever it sampled
(end-of-generation tokens are ignored, like `ignore_eos`). Prompts are seeded pseudo-random token
ids, different for every request, so nothing is shared between sequences.

Every size is checked against `n_ctx`, `n_batch` and `n_seq_max` before `llama_decode`: llama.cpp
reports some violations with a GGML_ASSERT, which aborts the whole process.
"""

from __future__ import annotations

import ctypes
import heapq
import os
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from calibrate.llama_buffers import decode_crashed, extra_bufts_crash
from calibrate.replay.dispatch import Dispatcher
from calibrate.replay.errors import EngineUnreachable, ReplayInterrupted
from calibrate.replay.records import REJECTED, Measurement, ReplayResult
from sim.cost.llamacpp import Piece, split_equal
from sim.errors import ConfigError
from workloads.request import Request


def default_threads() -> int:
    """Hardware threads this process may use (affinity-aware) — llama.cpp's compute threads."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class LocalConfig:
    """Engine settings of the in-process driver (names as llama.cpp's context parameters).

    `n_seq_max`: concurrent sequences (llama-server `--parallel`); `n_ctx_per_seq`: KV cells each
    sequence owns (llama-server gives each slot n_ctx / parallel); `n_batch`: tokens one iteration may
    process (prefill + decode; also the physical ubatch); `n_threads`: llama.cpp compute threads.
    """

    n_seq_max: int = 4
    n_ctx_per_seq: int = 2048
    n_batch: int = 512
    n_threads: int = 0  # 0 = default_threads()
    seed: int = 0
    # llama.cpp's extra weight buffers (AMX / CPU_REPACK repacking; calibrate.llama_buffers): off where
    # a decode crashes with them (`replay_local` checks in a child first)
    extra_bufts: bool = True

    @property
    def n_ctx(self) -> int:
        return self.n_seq_max * self.n_ctx_per_seq

    def threads(self) -> int:
        return self.n_threads or default_threads()


_NULL_LOG = None  # keeps the ctypes log callback alive for the life of the process


def _silence_llama_log(llama_cpp) -> None:
    """Route llama.cpp's and ggml's log lines to nowhere (they would interleave with our output)."""
    global _NULL_LOG
    if _NULL_LOG is None:
        _NULL_LOG = llama_cpp.llama_log_callback(lambda level, text, user_data: None)
    llama_cpp.llama_log_set(_NULL_LOG, ctypes.c_void_p(0))


def _import_llama_cpp():
    try:
        import llama_cpp
    except ImportError as e:  # a missing optional dependency is the user's setup: exit 2 with the fix
        raise ConfigError("the --local driver needs llama-cpp-python: pip install 'infersim[replay]'",
                          field="--local") from e
    return llama_cpp


@dataclass
class _Sequence:
    """One admitted request inside the engine."""

    seq_id: int
    meas: Measurement
    prompt: np.ndarray  # token ids
    target_tokens: int
    prompt_done: int = 0  # prompt tokens already in KV
    generated: int = 0
    last_token: int = 0

    @property
    def prefilling(self) -> bool:
        return self.prompt_done < len(self.prompt)

    @property
    def kv_tokens(self) -> int:
        """Cells this sequence holds: prompt processed so far + generated tokens fed back."""
        return self.prompt_done + max(self.generated - 1, 0)


class LlamaEngine:
    """Owns one llama.cpp model + context + batch; `close()` (or `with`) frees them."""

    def __init__(self, model_path: str | Path, cfg: LocalConfig) -> None:
        llama_cpp = _import_llama_cpp()
        self.ll = llama_cpp
        path = Path(model_path)
        if not path.is_file():
            raise ConfigError("model file not found", file=path, field="--local")
        _silence_llama_log(llama_cpp)
        llama_cpp.llama_backend_init()
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = 0
        mparams.use_extra_bufts = cfg.extra_bufts
        self.model = llama_cpp.llama_model_load_from_file(str(path).encode(), mparams)
        if not self.model:
            raise ConfigError("llama.cpp could not load this GGUF", file=path, field="--local")
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))
        self.bos = llama_cpp.llama_vocab_bos(self.vocab)
        self.n_ctx_train = llama_cpp.llama_model_n_ctx_train(self.model)

        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = cfg.n_ctx
        cparams.n_batch = cfg.n_batch
        cparams.n_ubatch = cfg.n_batch
        cparams.n_seq_max = cfg.n_seq_max
        cparams.n_threads = cfg.threads()
        cparams.n_threads_batch = cfg.threads()
        cparams.kv_unified = False  # one KV stream per sequence, as llama-server's slots
        cparams.no_perf = True
        self.ctx = llama_cpp.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            llama_cpp.llama_model_free(self.model)
            raise ConfigError(f"llama.cpp could not create a context of {cfg.n_ctx} tokens for "
                              f"{cfg.n_seq_max} sequences", file=path, field="--local")
        # llama.cpp may round or clamp what it was asked for: trust what it reports
        self.n_ctx = llama_cpp.llama_n_ctx(self.ctx)
        self.n_ctx_seq = llama_cpp.llama_n_ctx_seq(self.ctx)
        self.n_batch = llama_cpp.llama_n_batch(self.ctx)
        self.n_seq_max = llama_cpp.llama_n_seq_max(self.ctx)
        self.mem = llama_cpp.llama_get_memory(self.ctx)
        self.batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        self.samplers = [self._sampler_chain(cfg.seed + i) for i in range(self.n_seq_max)]
        self._piece = ctypes.create_string_buffer(64)
        self._closed = False

    def _sampler_chain(self, seed: int):
        """llama-server's default sampling chain, one per sequence: the calibration probes' own
        (`calibrate.probe_worker.sampler_chain`), so both time the same per-sequence work."""
        from calibrate.probe_worker import sampler_chain

        return sampler_chain(self.ll, seed)

    def __enter__(self) -> "LlamaEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for chain in self.samplers:
            self.ll.llama_sampler_free(chain)
        self.ll.llama_batch_free(self.batch)
        self.ll.llama_free(self.ctx)
        self.ll.llama_model_free(self.model)

    def decode(self, tokens: list[int], pos: list[int], seq: list[int], want_logits: list[bool]) -> None:
        """One llama_decode of a batch; sizes checked first (llama.cpp aborts on some violations)."""
        n = len(tokens)
        if not 0 < n <= self.n_batch:
            raise RuntimeError(f"batch of {n} tokens outside 1..n_batch={self.n_batch}")
        if max(seq) >= self.n_seq_max or min(seq) < 0:
            raise RuntimeError(f"seq_id outside 0..{self.n_seq_max - 1}")
        if max(pos) >= self.n_ctx_seq:
            raise RuntimeError(f"position {max(pos)} beyond the per-sequence context {self.n_ctx_seq}")
        b = self.batch
        b.n_tokens = n
        for i in range(n):
            b.token[i] = tokens[i]
            b.pos[i] = pos[i]
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq[i]
            b.logits[i] = 1 if want_logits[i] else 0
        rc = self.ll.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def warm_up(self) -> None:
        """One prompt batch and one decode step on sequence 0, then forget them.

        llama.cpp builds and allocates its compute graph on first use of a batch shape; a server has
        done that before its first request, so the measured run should not include it.
        """
        n = min(self.n_batch, 64, self.n_ctx_seq - 1)
        toks = [self.bos if self.bos >= 0 else 0] * n
        self.decode(toks, list(range(n)), [0] * n, [False] * (n - 1) + [True])
        self.decode([toks[0]], [n], [0], [True])
        self.free_sequence(0)

    def sample(self, seq_id: int, batch_index: int) -> int:
        """Sample the next token of a sequence from an output of the last batch, and detokenize it."""
        tok = self.ll.llama_sampler_sample(self.samplers[seq_id], self.ctx, batch_index)
        self.ll.llama_token_to_piece(self.vocab, tok, self._piece, 64, 0, False)
        return int(tok)

    def free_sequence(self, seq_id: int) -> None:
        self.ll.llama_memory_seq_rm(self.mem, seq_id, -1, -1)
        self.ll.llama_sampler_reset(self.samplers[seq_id])

    def prompt_tokens(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """`n` token ids: BOS when the model expects it, then seeded random ids (distinct per request)."""
        toks = rng.integers(0, self.n_vocab, size=n, dtype=np.int64)
        if self.add_bos and n > 0 and self.bos >= 0:
            toks[0] = self.bos
        return toks


def replay_local(
    requests: Sequence[Request],
    model_path: str | Path,
    *,
    concurrency: int | None = None,
    cfg: LocalConfig | None = None,
    timeout_s: float = 600.0,
) -> ReplayResult:
    """Serve `requests` with the in-process continuous-batching driver and measure every token.

    `concurrency`: N closed-loop clients (None: open loop at the trace's times). `cfg`: engine
    settings; by default `n_seq_max` = concurrency (or 4) and each sequence's context fits the
    longest request of the trace. Stops after `timeout_s` wall seconds, keeping what was measured.

    llama.cpp runs in this process, so a crash would end it: a four-token decode in a child first
    (calibrate.llama_buffers.extra_bufts_crash) says whether llama.cpp's extra weight buffers crash on
    this machine, and if they do the driver runs without them (`config["extra_weight_buffers_off"]`).
    """
    if not requests:
        raise ConfigError("the trace has no requests", field="trace")
    if cfg is None:
        longest = max(r.prompt_tokens + r.output_tokens for r in requests)
        cfg = LocalConfig(n_seq_max=concurrency or 4, n_ctx_per_seq=_round_up(longest + 1, 256))
    crash = extra_bufts_crash(model_path) if cfg.extra_bufts and Path(model_path).is_file() else ""
    if crash:
        cfg = replace(cfg, extra_bufts=False)
    try:
        engine = LlamaEngine(model_path, cfg)
    except (OSError, ValueError) as e:
        raise EngineUnreachable(f"llama.cpp failed to start: {e}") from e
    with engine:
        engine.warm_up()
        res = _serve(engine, requests, concurrency, cfg, timeout_s, model_path)
    if crash:
        res.config["extra_weight_buffers_off"] = decode_crashed(crash)
    return res


def _round_up(x: int, step: int) -> int:
    return -(-x // step) * step


def _serve(engine: LlamaEngine, requests, concurrency, cfg: LocalConfig, timeout_s, model_path) -> ReplayResult:
    dispatcher = Dispatcher(requests, concurrency)
    rng = np.random.default_rng(cfg.seed)
    wall0 = time.perf_counter()
    deadline = wall0 + timeout_s

    def clock() -> float:  # the trace's clock: the first request's arrival is "now" at start
        return dispatcher.start_s + (time.perf_counter() - wall0)

    measurements: list[Measurement] = []
    waiting: deque[tuple[Request, Measurement]] = deque()
    running: dict[int, _Sequence] = {}
    free_ids = list(range(engine.n_seq_max))  # a heap: the lowest free seq_id first, as llama-server's slots
    # one row per iteration, in the simulator's iterations.csv columns (sim.engine.metrics) plus what decides
    # llama.cpp's passes: the runs of consecutive decoding slots (see `order` below)
    iteration_log: dict[str, list] = {k: [] for k in ("start_s", "duration_s", "prefill_seqs", "prefill_tokens",
                                                      "decode_seqs", "decode_runs", "decode_context_mean")}
    kv_peak_used = 0
    kv_peak_reserved = 0
    error = ""

    def finish(s: _Sequence, now: float) -> None:
        s.meas.complete(now)
        engine.free_sequence(s.seq_id)
        heapq.heappush(free_ids, s.seq_id)
        del running[s.seq_id]
        dispatcher.finished(s.meas.id, now)

    interrupted = False
    try:  # SIGINT / SIGTERM (sigterm_as_interrupt) end the loop like the deadline: keep what was measured
        while not dispatcher.done:
            now = clock()
            if time.perf_counter() > deadline:
                error = f"timeout after {timeout_s:g} s"
                break
            for req, ready_s in dispatcher.ready(now):
                m = Measurement(req.id, ready_s, req.prompt_tokens, req.output_tokens)
                measurements.append(m)
                need = req.prompt_tokens + req.output_tokens
                if need > engine.n_ctx_seq or req.prompt_tokens < 1:
                    m.fail(f"prompt + output = {need} tokens does not fit the per-sequence context of "
                           f"{engine.n_ctx_seq}" if req.prompt_tokens >= 1 else "empty prompt", status=REJECTED)
                    dispatcher.finished(req.id, now)
                else:
                    waiting.append((req, m))
            while waiting and free_ids:  # admission: every iteration, while a sequence slot is free
                req, m = waiting.popleft()
                sid = heapq.heappop(free_ids)
                m.scheduled_s = now
                running[sid] = _Sequence(sid, m, engine.prompt_tokens(req.prompt_tokens, rng), max(req.output_tokens, 1))
            if not running:
                nxt = dispatcher.next_ready_s()
                if nxt is None:
                    if dispatcher.done:
                        break
                    raise RuntimeError("replay stalled: nothing running and nothing to release")  # a bug, not input
                time.sleep(min(max(nxt - clock(), 0.0), max(deadline - time.perf_counter(), 0.0)))
                continue

            # one iteration: decodes first, then prompt chunks up to n_batch tokens
            tokens: list[int] = []
            pos: list[int] = []
            seq: list[int] = []
            logits: list[bool] = []
            emitters: list[tuple[_Sequence, int]] = []  # sequence, its output index in the batch
            # Slot (seq_id) order, as llama-server walks its slots. With one KV stream per sequence
            # llama.cpp only puts consecutive seq_ids in one ubatch (`split_equal(n_ubatch, sequential)`,
            # chosen when the cache has several streams): decodes in admission order — e.g. 2, 3, 0, 1
            # after slots are reused — become several passes over the weights. Measured on Gemma 3 270M,
            # 1 thread: 4 decodes take 65 ms in order 0..3, 83 ms as 3, 0, 1, 2 and 104 ms as 2, 3, 0, 1.
            order = sorted(running.values(), key=lambda s: s.seq_id)
            for s in order:
                if not s.prefilling:
                    emitters.append((s, len(tokens)))
                    tokens.append(s.last_token)
                    pos.append(s.prompt_done + s.generated - 1)
                    seq.append(s.seq_id)
                    logits.append(True)
            n_decode = len(tokens)  # the decodes come first in the batch, one token each
            decode_slots = seq[:n_decode]
            budget = engine.n_batch - len(tokens)
            for s in running.values():  # prompts in admission order (FIFO, as the simulator's scheduler)
                if budget <= 0:
                    break
                if s.prefilling:
                    k = min(budget, len(s.prompt) - s.prompt_done)
                    chunk = s.prompt[s.prompt_done:s.prompt_done + k]
                    last = s.prompt_done + k == len(s.prompt)
                    for j, t in enumerate(chunk):
                        tokens.append(int(t))
                        pos.append(s.prompt_done + j)
                        seq.append(s.seq_id)
                        logits.append(last and j == k - 1)
                    if last:
                        emitters.append((s, len(tokens) - 1))
                    s.prompt_done += k
                    budget -= k
            t0 = clock()
            try:
                engine.decode(tokens, pos, seq, logits)
            except RuntimeError as e:
                error = f"llama.cpp stopped: {e}"
                break
            for s, idx in emitters:  # sample the whole batch, then its tokens exist (a server sends them now)
                s.last_token = engine.sample(s.seq_id, idx)
            t = clock()
            row = {"start_s": t0, "duration_s": t - t0, "prefill_seqs": len(set(seq[n_decode:])),
                   "prefill_tokens": len(tokens) - n_decode, "decode_seqs": n_decode,
                   # passes llama.cpp runs the decodes in: one per run of consecutive slots (sim.cost.llamacpp)
                   "decode_runs": len(split_equal([Piece(sid, 1, 0) for sid in decode_slots])),
                   "decode_context_mean": (sum(pos[:n_decode]) + n_decode) / n_decode if n_decode else 0.0}
            for key, value in row.items():
                iteration_log[key].append(value)
            kv_peak_used = max(kv_peak_used, sum(s.kv_tokens for s in running.values()))
            kv_peak_reserved = max(kv_peak_reserved, len(running) * engine.n_ctx_seq)
            for s, _ in emitters:
                s.generated += 1
                s.meas.token(t)
                if s.generated >= s.target_tokens:
                    finish(s, t)
    except KeyboardInterrupt:
        interrupted = True
        error = "interrupted"

    for s in list(running.values()):  # stopped early: free and keep what arrived
        s.meas.fail(error or "stopped")
        engine.free_sequence(s.seq_id)
    for req, m in waiting:
        m.fail(f"not admitted: {error}" if error else "not admitted")
    never_sent = dispatcher.abandon()
    records = [m.freeze() for m in measurements]
    records += [Measurement(r.id, r.arrival_s, r.prompt_tokens, r.output_tokens).freeze(
        f"not sent: {error}" if error else "not sent") for r in never_sent]
    config = {
        "target": "local", "model_path": str(model_path), "driver": "llama.cpp continuous batching",
        "concurrency": concurrency, "n_seq_max": engine.n_seq_max, "n_ctx": engine.n_ctx,
        "n_ctx_per_seq": engine.n_ctx_seq, "n_batch": engine.n_batch, "n_threads": cfg.threads(),
        "prompt_tokens_source": "exact",
        "llama_cpp_version": getattr(engine.ll, "__version__", None),
    }
    # sequences per iteration (a decoding sequence is never also prefilling)
    batch_sizes = [d + p for d, p in zip(iteration_log["decode_seqs"], iteration_log["prefill_seqs"])]
    stats = {
        "batch_sizes": batch_sizes, "kv_capacity_tokens": engine.n_ctx,
        "kv_peak_used_fraction": kv_peak_used / engine.n_ctx,
        "kv_peak_reserved_fraction": kv_peak_reserved / engine.n_ctx,
        "iterations": len(batch_sizes),
        "iteration_log": iteration_log,
    }
    result = ReplayResult(tuple(records), config, stats, error)
    if interrupted:
        raise ReplayInterrupted(partial=result)
    return result
