"""The child process that times llama.cpp: `python -m calibrate.probe_worker < plan.json`.

Runs in its own process (started by `calibrate.probes.run_plan`) so that a crash inside
llama.cpp — a GGML_ASSERT abort, a segfault — kills only this child and reaches the user as an
error message. Protocol: one JSON plan on stdin; one JSON object per line on the protocol pipe
(the original stdout; C-level stdout is redirected to stderr so nothing else can interleave):

    {"event": "load", ...}     model load times (cold = first load in this fresh process,
                               warm = reloads of the same file, now in the OS page cache)
    {"event": "point", ...}    one probe point: median, spread and all samples of its timed runs
                               (with plan["rounds"] = R the whole plan runs R times over, and every
                               point comes once per round: `calibrate.probes.merge_rounds`)
    {"event": "error", "message": ...}   a refused size or a failed llama.cpp call (exit status 3)
    {"event": "done"}

Every probe point is one *iteration shape*, the unit the cost model prices: an optional prefill
chunk of P tokens on top of Cp tokens already cached, plus B sequences decoding one token each at
context Cd. Each timed run is what an engine iteration does: build the `llama_batch`, one
`llama_decode`, then sample one token for every sequence that produced logits (a top-k / top-p /
min-p / temperature chain with llama-server's defaults) and detokenize it. So sampling over the
vocabulary — the per-sequence cost an engine adds — is inside the measurement.
"""

from __future__ import annotations

import collections
import ctypes
import json
import os
import signal
import statistics
import sys
import time
from dataclasses import dataclass

# llama-server / common defaults (llama.cpp common/common.h, struct common_params_sampling):
# top_k = 40, top_p = 0.95, min_p = 0.05, temp = 0.80.
SAMPLER_TOP_K = 40
SAMPLER_TOP_P = 0.95
SAMPLER_MIN_P = 0.05
SAMPLER_TEMP = 0.80

# The probes' contexts keep llama_context_default_params()'s flash_attn_type, LLAMA_FLASH_ATTN_TYPE_AUTO, which
# llama.cpp resolves to on where the device runs the flash-attention op (every CPU), so they ran with flash
# attention on: the fit prices them so (calibrate.calibration._finish, EngineConfig.kv_padding_for).
FLASH_ATTENTION = True

# ggml_log_level (ggml.h): 0 NONE, 1 DEBUG, 2 INFO, 3 WARN, 4 ERROR, 5 CONT.
_LOG_WARN_OR_ERROR = (3, 4)


def sampler_chain(llama_cpp, seed: int):
    """llama-server's default sampling chain (top-k, top-p, min-p, temperature, seeded draw), one per
    sequence as an engine keeps it. Free with `llama_sampler_free`."""
    L = llama_cpp
    chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    L.llama_sampler_chain_add(chain, L.llama_sampler_init_top_k(SAMPLER_TOP_K))
    L.llama_sampler_chain_add(chain, L.llama_sampler_init_top_p(SAMPLER_TOP_P, 1))
    L.llama_sampler_chain_add(chain, L.llama_sampler_init_min_p(SAMPLER_MIN_P, 1))
    L.llama_sampler_chain_add(chain, L.llama_sampler_init_temp(SAMPLER_TEMP))
    L.llama_sampler_chain_add(chain, L.llama_sampler_init_dist(seed))
    return chain


class ProbeSizeError(ValueError):
    """A probe that does not fit the context (n_ctx, n_batch, n_seq_max): refused before llama_decode."""


@dataclass(frozen=True)
class ContextLimits:
    """The sizes llama.cpp granted a context (it may round n_ctx up)."""

    n_ctx: int
    n_ctx_seq: int  # positions one sequence may hold (n_ctx, or n_ctx / n_seq_max without unified KV)
    n_batch: int  # tokens one llama_decode call may take
    n_seq_max: int
    kv_unified: bool


def probe_fits(probe: dict, limits: ContextLimits) -> str | None:
    """Why `probe` does not fit `limits`, or None when it fits. Checked in parent and child.

    Counts what the probe will put into the KV cache: Cp + P positions for the prefill sequence
    (seq id B), Cd + warmup + runs positions for each of the B decode sequences (seq ids 0..B-1),
    since the decode sequences grow by one token per timed or warm-up run.
    """
    p, cp = int(probe["prefill_tokens"]), int(probe["prefill_context"])
    b, cd = int(probe["decode_batch"]), int(probe["decode_context"])
    runs = int(probe["warmup"]) + int(probe.get("max_runs", probe["runs"]))
    if p < 0 or cp < 0 or b < 0 or cd < 0 or (p == 0 and b == 0):
        return "a probe needs prefill_tokens > 0 or decode_batch > 0, all sizes >= 0"
    if b > 0 and cd < 1:
        return "decode sequences need decode_context >= 1 (a prompt to continue)"
    n_seqs = b + (1 if p else 0)
    if n_seqs > limits.n_seq_max:
        return f"{n_seqs} sequences exceed n_seq_max={limits.n_seq_max}"
    if p + b > limits.n_batch:
        return f"{p + b} tokens in one llama_decode exceed n_batch={limits.n_batch}"
    if p and cp + p > limits.n_ctx_seq:
        return f"prefill to position {cp + p} exceeds the per-sequence context {limits.n_ctx_seq}"
    if b and cd + runs > limits.n_ctx_seq:
        return f"decode to position {cd + runs} exceeds the per-sequence context {limits.n_ctx_seq}"
    cells = (cp + p if p else 0) + b * (cd + runs)
    if limits.kv_unified and cells > limits.n_ctx:
        return f"{cells} KV cells needed exceed n_ctx={limits.n_ctx}"
    return None


# A point whose interquartile range exceeds this share of its median is sampled again (up to its
# max_runs / time cap): on a shared machine another process can stall llama.cpp's threads for
# hundreds of milliseconds, and more samples keep such runs out of the median.
SPREAD_TARGET = 0.15
TIME_CAP_FACTOR = 8.0  # never spend more than this x min_time_s on one point
# A timed run counts as undisturbed when its CPU share (process CPU seconds / (wall seconds x
# threads)) is at least this fraction of the best share seen so far in the whole probe run (or in
# the point itself, if higher). A run during which the OS gave a llama.cpp thread's core to another
# process shows up as a lower share: measured here on a 2-core machine shared with other work,
# undisturbed single-thread decode runs had a share of 0.99 and disturbed ones 0.5-0.65, with wall
# times 2-3x longer. The reference is run-wide so that a point whose runs were *all* disturbed is
# recognised too (it then keeps sampling until its time cap, and falls back to its best runs).
UNDISTURBED_SHARE = 0.85
# Within one round (the worker's rule; `undisturbed(on_cpu=True)`), a run also has to take at most
# this multiple of the fewest CPU seconds among the point's share-keeping runs. The share misses a
# disturbance that slows the thread *while it runs* (caches refilled after another process ran on
# the core, a neighbour on the host's sibling hyperthread): CPU time then grows with wall time and
# the share stays ~1.0. Measured on this 2-vCPU KVM guest (2026-12-07, quick tiny-GGUF calibration,
# 11,330 timed runs, 0-3 busy loops: benchmarks/calibrate_contention.py, calibrate_signals.py):
# runs over 1.3x their point's 10th-percentile wall time ("disturbed") had a median CPU share of
# 1.004, the same as the others, and the share rule kept 5,256 of 7,947 of them. Runqueue wait
# (/proc/self/task/*/schedstat) and involuntary context switches separated them only weakly: "wait
# <= 5 % of the run" or "no involuntary switch" classified 69 % of runs right but dropped a third of
# the undisturbed ones (the /proc reads around a sub-ms run take longer than the run); /proc/stat
# steal comes in 10 ms ticks and was 0 throughout. CPU seconds against the point's fewest did best:
# p50/p90 1.10/1.36 without busy loops, 1.26/1.79 with them; share and <= 1.25 x fewest classified
# 78 % right, dropping 528 of 3,383 undisturbed runs. 1.25 is also the threshold that did best when the
# dumped runs were replayed and fitted again (benchmarks/calibrate_statistics.py, 25 trials):
# held-out error under log 2 in 22/25 trials, against 19/25 for the share alone, 20/25 at 1.15 and
# 21/25 at 1.4 -- a small gain: most of that error is not disturbance (with every point at its
# quietest pooled speed the replay's held-out error is still 0.45-0.54).
ON_CPU_SLOWDOWN = 1.25


def cpu_shares(wall_s: list[float], cpu_s: list[float], n_threads: int) -> list[float]:
    return [c / (w * n_threads) if w > 0 else 0.0 for w, c in zip(wall_s, cpu_s)]


def undisturbed(wall_s: list[float], cpu_s: list[float], n_threads: int, reference_share: float = 0.0,
                on_cpu: bool = False) -> list[bool]:
    """Which runs kept (nearly) their full CPU share (UNDISTURBED_SHARE); with `on_cpu`, also took
    at most ON_CPU_SLOWDOWN x the fewest CPU seconds among the runs that kept their share (the
    worker's rule for the runs of one round; pooled rounds, `probes.merge_rounds`, are judged by
    share alone, so that each round's speed stays one of the moments the pool stands for). All
    runs count when no CPU time was measured."""
    shares = cpu_shares(wall_s, cpu_s, n_threads)
    best = max(shares, default=0.0)
    if best <= 0:
        return [True] * len(wall_s)
    ref = max(best, reference_share)
    kept = [sh >= UNDISTURBED_SHARE * ref for sh in shares]
    fewest = min((c for c, k in zip(cpu_s, kept) if k and c > 0), default=0.0)
    if on_cpu and fewest > 0:
        kept = [k and c <= ON_CPU_SLOWDOWN * fewest for k, c in zip(kept, cpu_s)]
    return kept


def _wants_more(wall_s: list[float], kept: list[bool], max_runs: int, min_runs: int, min_time_s: float) -> bool:
    """Whether a probe point should take another timed run.

    More runs while fewer than `max_runs`, and any of: the runs so far total under `min_time_s`
    (cheap points get many samples); fewer than `min_runs` undisturbed runs; the undisturbed runs'
    spread is above SPREAD_TARGET. Never beyond TIME_CAP_FACTOR x `min_time_s` of timed runs.
    """
    n, total = len(wall_s), sum(wall_s)
    if n >= max_runs or (min_time_s > 0 and total >= TIME_CAP_FACTOR * min_time_s):
        return False
    good = [w for w, k in zip(wall_s, kept) if k]
    if total < min_time_s or len(good) < min_runs:
        return True
    if len(good) >= 4:
        q = statistics.quantiles(good, n=4, method="inclusive")
        return (q[2] - q[0]) > SPREAD_TARGET * statistics.median(good)
    return False


def summarize(wall_s: list[float], cpu_s: list[float], n_threads: int, reference_share: float = 0.0,
              on_cpu: bool = False) -> dict:
    """The point's kept value and spread, in seconds.

    `median_s` (the value the fit uses) is the median of the undisturbed runs (see `undisturbed`);
    quartiles, min and max are over the same runs; `median_all_s` is over every timed run, and
    `samples_s` / `cpu_s` keep them all.
    """
    kept = undisturbed(wall_s, cpu_s, n_threads, reference_share, on_cpu)
    if not any(kept):  # every run disturbed: keep the least disturbed ones, so the point has a value
        kept = undisturbed(wall_s, cpu_s, n_threads, on_cpu=on_cpu)
    s = sorted(w for w, k in zip(wall_s, kept) if k) or sorted(wall_s)
    q = statistics.quantiles(s, n=4, method="inclusive") if len(s) > 1 else [s[0], s[0], s[0]]
    return {
        "median_s": statistics.median(s),
        "p25_s": q[0],
        "p75_s": q[2],
        "min_s": s[0],
        "max_s": s[-1],
        "median_all_s": statistics.median(wall_s),
        "undisturbed_runs": len(s),
        "samples_s": wall_s,
        "cpu_s": cpu_s,
    }


def runqueue_wait_s() -> float | None:
    """Seconds this process's threads have waited on a run queue (ready to run, not running) since
    they started: the sum of field 2 of /proc/self/task/*/schedstat (Linux, CONFIG_SCHED_INFO).
    None where the file is missing (non-Linux, or a kernel without scheduler info)."""
    total = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    for t in tasks:
        try:
            with open(f"/proc/self/task/{t}/schedstat") as f:
                total += int(f.read().split()[1])
        except FileNotFoundError:  # a thread that ended between listdir and open
            continue
        except (OSError, ValueError, IndexError):
            return None
    return total / 1e9


def _steal_s() -> float | None:
    """Machine-wide hypervisor steal seconds so far (/proc/stat, all CPUs, in USER_HZ = 100 ticks/s)."""
    try:
        with open("/proc/stat") as f:
            return int(f.readline().split()[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _signals_now() -> tuple[float | None, int | None, float | None]:
    """Runqueue wait seconds, involuntary context switches, machine-wide steal seconds so far."""
    try:
        import resource  # Unix only

        nivcsw = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
    except ImportError:
        nivcsw = None
    return runqueue_wait_s(), nivcsw, _steal_s()


class _Worker:
    """Owns one model, one context at a time, its batch and samplers."""

    def __init__(self, plan: dict, out) -> None:
        import llama_cpp as L

        self.L = L
        self.plan = plan
        self.out = out
        self.model = None
        self.ctx = None
        self.batch = None
        self.batch_capacity = 0
        self.samplers: list = []
        self.seed = int(plan.get("seed", 0))
        self.next_token = 0
        self.best_share = 0.0  # best CPU share of any timed run so far (see `undisturbed`)
        L.llama_backend_init()
        # Silence llama.cpp's logging, but keep its last warnings/errors to explain a failed call.
        # (The callback object stays referenced by self so ctypes does not free it.)
        self.recent_log: collections.deque[str] = collections.deque(maxlen=4)

        def on_log(level: int, text: bytes, user_data) -> None:
            if level in _LOG_WARN_OR_ERROR and text:
                line = text.decode(errors="replace").strip()
                if line:
                    self.recent_log.append(line)

        self._log_cb = L.llama_log_callback(on_log)
        L.llama_log_set(self._log_cb, ctypes.c_void_p(0))

    def llama_error(self, what: str) -> RuntimeError:
        """An error for a failed llama.cpp call, with llama.cpp's own last message when it left one."""
        said = f" (llama.cpp: {self.recent_log[-1]})" if self.recent_log else ""
        return RuntimeError(what + said)

    def emit(self, obj: dict) -> None:
        self.out.write(json.dumps(obj) + "\n")
        self.out.flush()

    # ---- model and context ---------------------------------------------------------------------
    def load_model(self) -> float:
        L = self.L
        params = L.llama_model_default_params()
        params.n_gpu_layers = int(self.plan.get("n_gpu_layers", 0))
        # llama.cpp's repacked CPU weight buffers (AMX, CPU_REPACK), on unless the plan turns them off
        # (probes.run_plan does after they crashed the first run)
        params.use_extra_bufts = bool(self.plan.get("extra_bufts", True))
        t0 = time.perf_counter()
        model = L.llama_model_load_from_file(self.plan["model_path"].encode(), params)
        dt = time.perf_counter() - t0
        if not model:
            raise self.llama_error(f"llama.cpp could not load the model file {self.plan['model_path']}")
        self.model = model
        self.vocab = L.llama_model_get_vocab(model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        return dt

    def free_model(self) -> None:
        self.free_context()
        if self.model:
            self.L.llama_model_free(self.model)
            self.model = None

    def measure_loads(self) -> None:
        cold = self.load_model()
        warm = []
        for _ in range(int(self.plan.get("warm_loads", 2))):
            self.free_model()
            warm.append(self.load_model())
        self.emit({"event": "load", "cold_s": cold, "warm_s": warm,
                   "warm_median_s": statistics.median(warm) if warm else None,
                   "n_vocab": self.n_vocab,
                   "llama_cpp_version": self.L.llama_version().decode(errors="replace"),
                   "llama_system_info": self.L.llama_print_system_info().decode(errors="replace").strip()})

    def open_context(self, session: dict) -> ContextLimits:
        L = self.L
        self.free_context()
        cp = L.llama_context_default_params()
        cp.n_ctx = int(session["n_ctx"])
        cp.n_batch = int(session["n_batch"])
        cp.n_ubatch = int(session.get("n_ubatch", min(512, session["n_batch"])))
        cp.n_seq_max = int(session["n_seq_max"])
        cp.kv_unified = bool(session.get("kv_unified", False))
        cp.n_threads = cp.n_threads_batch = int(self.plan["n_threads"])
        cp.no_perf = True  # flash_attn_type stays auto: on for the CPU (FLASH_ATTENTION)
        t0 = time.perf_counter()
        ctx = L.llama_init_from_model(self.model, cp)
        dt = time.perf_counter() - t0
        if not ctx:
            raise self.llama_error(
                f"llama.cpp could not create a context (n_ctx={cp.n_ctx}, n_batch={cp.n_batch}, "
                f"n_seq_max={cp.n_seq_max}): out of memory or unsupported sizes"
            )
        self.ctx = ctx
        self.mem = L.llama_get_memory(ctx)
        limits = ContextLimits(
            n_ctx=L.llama_n_ctx(ctx), n_ctx_seq=L.llama_n_ctx_seq(ctx), n_batch=L.llama_n_batch(ctx),
            n_seq_max=L.llama_n_seq_max(ctx), kv_unified=cp.kv_unified,
        )
        self.batch = L.llama_batch_init(limits.n_batch, 0, 1)
        self.batch_capacity = limits.n_batch
        self.samplers = [self._make_sampler(i) for i in range(limits.n_seq_max)]
        self.emit({"event": "context", "session": session["name"], "create_s": dt, **limits.__dict__})
        return limits

    def _make_sampler(self, i: int):
        return sampler_chain(self.L, self.seed + i)

    def free_context(self) -> None:
        L = self.L
        for s in self.samplers:
            L.llama_sampler_free(s)
        self.samplers = []
        if self.batch is not None:
            L.llama_batch_free(self.batch)
            self.batch = None
        if self.ctx:
            L.llama_free(self.ctx)
            self.ctx = None

    # ---- batches ---------------------------------------------------------------------------------
    def _token(self) -> int:
        """Deterministic pseudo-random prompt tokens, skipping the first ids (special/control tokens)."""
        self.next_token = (self.next_token * 1103515245 + 12345 + self.seed) % 2**31
        lo = min(16, self.n_vocab - 1)
        return lo + self.next_token % (self.n_vocab - lo)

    def _fill(self, entries: list[tuple[int, int, int, bool]]) -> None:
        """Put (token, pos, seq_id, wants_logits) entries into the batch."""
        if len(entries) > self.batch_capacity:
            raise ProbeSizeError(f"{len(entries)} tokens exceed the batch capacity {self.batch_capacity}")
        b = self.batch
        b.n_tokens = len(entries)
        for i, (tok, pos, seq, logits) in enumerate(entries):
            b.token[i] = tok
            b.pos[i] = pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq
            b.logits[i] = logits

    def _decode(self) -> None:
        rc = self.L.llama_decode(self.ctx, self.batch)
        if rc != 0:
            raise self.llama_error(f"llama_decode returned {rc} for a batch of {self.batch.n_tokens} tokens")

    def _sample(self, seq: int, batch_index: int) -> int:
        """Sample and detokenize one token, as an engine does for every sequence every step."""
        L = self.L
        tok = L.llama_sampler_sample(self.samplers[seq], self.ctx, batch_index)
        buf = (ctypes.c_char * 64)()
        L.llama_token_to_piece(self.vocab, tok, buf, 64, 0, False)
        return tok

    def _prefill_untimed(self, seq_lengths: dict[int, int], limits: ContextLimits) -> None:
        """Fill sequences to the given lengths, packing tokens of several sequences per llama_decode."""
        pending = [(tok_seq, pos) for tok_seq, n in seq_lengths.items() for pos in range(n)]
        for start in range(0, len(pending), limits.n_batch):
            chunk = pending[start:start + limits.n_batch]
            self._fill([(self._token(), pos, seq, False) for seq, pos in chunk])
            self._decode()

    # ---- one probe point ---------------------------------------------------------------------------
    def run_probe(self, probe: dict, limits: ContextLimits) -> None:
        L = self.L
        why = probe_fits(probe, limits)
        if why and not self.plan.get("unchecked", False):
            raise ProbeSizeError(f"probe {probe['id']}: {why}")
        p, cp = int(probe["prefill_tokens"]), int(probe["prefill_context"])
        b, cd = int(probe["decode_batch"]), int(probe["decode_context"])
        warmup, min_runs = int(probe["warmup"]), int(probe["runs"])
        max_runs = int(probe.get("max_runs", min_runs))
        min_time_s = float(probe.get("min_time_s", 0.0))
        prefill_seq = b  # decode sequences are 0..b-1, the prefill sequence comes after them

        L.llama_memory_clear(self.mem, True)
        for s in self.samplers:
            L.llama_sampler_reset(s)
        setup = {seq: cd for seq in range(b)}
        if p and cp:
            setup[prefill_seq] = cp
        self._prefill_untimed(setup, limits)
        last = {seq: self._token() for seq in range(b)}  # the token each decode sequence feeds next

        n_threads = int(self.plan["n_threads"])
        samples: list[float] = []
        cpu: list[float] = []
        kept: list[bool] = []
        # plan["record_signals"] (benchmarks/calibrate_contention.py): each timed run's disturbance
        # signals too, read around the timed interval (outside it), for calibrate_signals.py
        record = bool(self.plan.get("record_signals"))
        signals: dict[str, list] = {"wait_s": [], "nivcsw": [], "steal_s": []}
        r = 0
        while r < warmup + min_runs or _wants_more(samples, kept, max_runs, min_runs, min_time_s):
            if p:  # the prefill chunk is recomputed each run: drop what the previous run cached
                L.llama_memory_seq_rm(self.mem, prefill_seq, cp, -1)
            entries = [(last[seq], cd + r, seq, True) for seq in range(b)]
            entries += [(self._token(), cp + i, prefill_seq, i == p - 1) for i in range(p)]
            before = _signals_now() if record else None
            c0 = time.process_time()
            t0 = time.perf_counter()
            self._fill(entries)
            self._decode()
            L.llama_synchronize(self.ctx)
            for i in range(b):
                last[i] = self._sample(i, i)
            if p:
                self._sample(prefill_seq, len(entries) - 1)
            dt = time.perf_counter() - t0
            dc = time.process_time() - c0
            if record and r >= warmup:
                for k, v1, v0 in zip(signals, _signals_now(), before):
                    signals[k].append(None if v0 is None or v1 is None else v1 - v0)
            if r >= warmup:
                samples.append(dt)
                cpu.append(dc)
                kept = undisturbed(samples, cpu, n_threads, self.best_share, on_cpu=True)
            r += 1
        # Decode sequences advance one position per run: the timed runs saw contexts
        # cd + warmup ... cd + warmup + runs - 1; the cost model is linear in context, so the mean
        # context is the one the median time corresponds to.
        self.best_share = max([self.best_share, *cpu_shares(samples, cpu, n_threads)])
        runs = len(samples)
        mean_decode_context = cd + warmup + (runs - 1) / 2.0 if b else 0.0
        self.emit({
            "event": "point", "id": probe["id"], "kind": probe["kind"], "session": probe["session"],
            "round": probe.get("round", 0),
            "prefill_tokens": p, "prefill_context": cp, "decode_batch": b,
            "decode_context": mean_decode_context, "runs": runs, "warmup": warmup,
            **summarize(samples, cpu, n_threads, self.best_share, on_cpu=True),
            **({"signals": signals} if record else {}),
        })

    def inject_fault(self, limits: ContextLimits) -> None:
        """Test hook (plan key "inject_fault"): make llama.cpp abort the way a buggy probe would.

        "sample_without_logits" decodes a batch that asks for no logits, then samples from it:
        llama.cpp's sampler hits GGML_ASSERT(logits != nullptr) and aborts the process. Tests use
        it to check that such a crash reaches the user as an error message, not as a crash.
        "segfault_with_extra_bufts" kills the process with SIGSEGV while the plan leaves llama.cpp's
        extra weight buffers on, as their AMX kernels do on some machines (probes.run_plan);
        "segfault" kills it whatever the plan says.
        """
        fault = self.plan.get("inject_fault")
        if fault in ("segfault", "segfault_with_extra_bufts"):
            if fault == "segfault" or self.plan.get("extra_bufts", True):
                os.kill(os.getpid(), signal.SIGSEGV)
        elif fault == "sample_without_logits":
            self._fill([(self._token(), i, 0, False) for i in range(4)])
            self._decode()
            self._sample(0, 0)
        elif fault:
            raise RuntimeError(f"unknown fault {fault!r}")

    def run(self) -> None:
        self.measure_loads()
        for rnd in range(int(self.plan.get("rounds", 1))):
            for session in self.plan["sessions"]:
                limits = self.open_context(session)
                self.inject_fault(limits)
                for probe in session["probes"]:
                    self.emit({"event": "start", "id": probe["id"], "round": rnd})
                    self.run_probe({**probe, "session": session["name"], "round": rnd}, limits)
        self.free_model()
        self.emit({"event": "done"})


def main() -> int:
    # Keep the protocol channel private: C code that prints to stdout (fd 1) goes to stderr instead.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    plan = json.loads(sys.stdin.read())
    worker = None
    try:
        worker = _Worker(plan, proto)
        worker.run()
    except (ProbeSizeError, RuntimeError) as e:
        proto.write(json.dumps({"event": "error", "message": str(e)}) + "\n")
        proto.flush()
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
