"""Plan the llama.cpp probes, check their sizes, and run them in an isolated child process.

The child is `python -m calibrate.probe_worker` (see there for the protocol and for what one
timed run contains). This module decides *which* iteration shapes to time:

- prefill: one prompt of P tokens as a single chunk (P = 32 … 2048 within the context), and a few
  chunks on top of an already cached prefix (chunked prefill);
- single-sequence decode at several context lengths;
- batched decode: B sequences in one `llama_batch` (B = 1 … 16), which is what continuous batching
  does on every iteration;
- mixed iterations: one prefill chunk together with B decodes (full plan), to check that the cost
  model's sum of terms holds for the shapes chunked-prefill schedulers produce.

Every probe is checked against its context's n_ctx, n_batch and n_seq_max here, before the child
starts, and again in the child against the sizes llama.cpp actually granted.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

from calibrate.llama_buffers import CRASH_SIGNALS, signal_name
from calibrate.probe_worker import ContextLimits, probe_fits


class ProbeError(RuntimeError):
    """The probes could not run: refused sizes, a llama.cpp error, a crash, or a timeout. `signal`:
    the signal's name ("SIGSEGV") when the child process died of one."""

    def __init__(self, message: str, *, signal: str = "") -> None:
        super().__init__(message)
        self.signal = signal


@dataclass(frozen=True)
class ProbePoint:
    """One timed iteration shape and its measured seconds (median of the timed runs, with spread)."""

    id: str
    kind: str  # "prefill" | "decode" | "mixed"
    prefill_tokens: int
    prefill_context: int
    decode_batch: int
    decode_context: float  # mean context of the decode sequences over the timed runs
    median_s: float
    p25_s: float
    p75_s: float
    min_s: float
    max_s: float
    runs: int
    samples_s: tuple[float, ...] = ()
    session: str = ""
    median_all_s: float | None = None  # median over every timed run, disturbed ones included
    undisturbed_runs: int | None = None
    cpu_s: tuple[float, ...] = ()  # the child's CPU seconds of each timed run (same order as samples_s)
    rounds: int = 1  # rounds of the plan (and `calibrate --extend` runs) whose samples are pooled here

    @property
    def spread(self) -> float:
        """Interquartile range over the median: the relative noise of this point."""
        return (self.p75_s - self.p25_s) / self.median_s if self.median_s > 0 else 0.0

    @property
    def new_tokens(self) -> int:
        return self.prefill_tokens + self.decode_batch

    def label(self) -> str:
        parts = []
        if self.prefill_tokens:
            parts.append(f"prefill {self.prefill_tokens}" + (f" @{self.prefill_context}" if self.prefill_context else ""))
        if self.decode_batch:
            parts.append(f"decode x{self.decode_batch} @{self.decode_context:.0f}")
        return " + ".join(parts)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["samples_s"] = [round(x, 9) for x in self.samples_s]
        d["cpu_s"] = [round(x, 9) for x in self.cpu_s]
        return d

    def to_event(self) -> dict:
        """The point as the worker's "point" event (what `merge_rounds` pools)."""
        return {**self.to_dict(), "event": "point"}

    @classmethod
    def from_event(cls, e: dict) -> "ProbePoint":
        return cls(
            id=e["id"], kind=e["kind"], prefill_tokens=int(e["prefill_tokens"]),
            prefill_context=int(e["prefill_context"]), decode_batch=int(e["decode_batch"]),
            decode_context=float(e["decode_context"]), median_s=e["median_s"], p25_s=e["p25_s"],
            p75_s=e["p75_s"], min_s=e["min_s"], max_s=e["max_s"], runs=int(e["runs"]),
            samples_s=tuple(e.get("samples_s", ())), session=e.get("session", ""),
            median_all_s=e.get("median_all_s"), undisturbed_runs=e.get("undisturbed_runs"),
            cpu_s=tuple(e.get("cpu_s", ())), rounds=int(e.get("rounds", 1)),
        )


@dataclass(frozen=True)
class ProbeRun:
    """Everything one probe run measured."""

    points: tuple[ProbePoint, ...]
    load_cold_s: float
    load_warm_s: tuple[float, ...]
    contexts: tuple[dict, ...]
    llama_system_info: str
    wall_s: float
    llama_cpp_version: str = ""
    plan_summary: dict = field(default_factory=dict)
    # why llama.cpp's repacked weight buffers were off (`run_plan`), "" when they ran as shipped
    extra_bufts_off: str = ""

    @property
    def load_warm_median_s(self) -> float | None:
        return statistics.median(self.load_warm_s) if self.load_warm_s else None


# ---- planning -------------------------------------------------------------------------------------


def probe_spec(pid: str, kind: str, *, p: int = 0, cp: int = 0, b: int = 0, cd: int = 0, warmup: int,
               runs: int, max_runs: int, min_time_s: float) -> dict:
    """One probe of a plan: a P-token prompt on Cp cached tokens plus B decodes at context Cd, and its repeats."""
    return {"id": pid, "kind": kind, "prefill_tokens": p, "prefill_context": cp, "decode_batch": b,
            "decode_context": cd, "warmup": warmup, "runs": runs, "max_runs": max_runs,
            "min_time_s": min_time_s}


def build_plan(
    model_path: str | Path,
    *,
    n_ctx_train: int,
    quick: bool = False,
    n_threads: int,
    n_gpu_layers: int = 0,
    seed: int = 0,
) -> dict:
    """The probe plan for a model whose training context is `n_ctx_train`.

    Two llama.cpp contexts: "single" (one sequence, n_ctx up to 2048 + headroom) for prefill and
    single-stream decode; "batched" (16 sequences, each with its own KV stream — kv_unified off, so
    every sequence's attention reads only its own cache, as the cost model assumes) for batched
    decode and for mixed iterations (a prompt chunk together with decodes), which llama.cpp runs
    there as two passes over the weights, the decodes with the chunk's first token and then the
    rest of the chunk — how the fit prices them (`sim.cost.llamacpp`, `calibrate.fit.observation_passes`).
    A unified cache would take a mixed batch in one pass but make every token's attention span the
    cells of all sequences (masked), a cost the model does not have. Shapes larger than the model's
    context are left out.
    """
    max_single = min(2048, n_ctx_train)
    if quick:
        prefill = [32, 64, 128, 256, 512, 1024]
        chunks = [(128, 512)]
        single_decode = [32, 512, 1024]
        # two contexts for every batch size: the decode-attention slowdown (sim.cost) is the slope
        # of step time in batch x context, which one context cannot show
        batched_decode = [(b, c) for c in (64, 192) for b in (2, 4, 8, 16)] + [(6, 64)]
        mixed: list[tuple[int, int, int, int]] = [(64, 0, 4, 64)]
        per_seq_ctx = 256
        rounds = 1
        reps = {"warmup": 1, "runs": 3, "max_runs": 9, "min_time_s": 0.25}
        dreps = {"warmup": 2, "runs": 8, "max_runs": 32, "min_time_s": 0.25}
    else:
        prefill = [32, 64, 128, 256, 384, 512, 768, 1024, 1536, 2048]
        chunks = [(128, 512), (256, 1024), (512, 1024)]
        single_decode = [32, 256, 512, 1024, 1536, 1984]
        # 3 and 12 too at the short context: the step time is not linear in the batch (a GEMV at 1,
        # tiled GEMMs from 2 on, see sim.cost), so the batch axis gets the densest sampling;
        # 6 and 10 leave rows over past a 4-row tile: a second pass over the weights (sim.cost.llamacpp.gemm_rows)
        batched_decode = [(b, c) for c in (64, 512) for b in (1, 2, 4, 8, 16)] + [(3, 64), (12, 64), (6, 64), (10, 512)]
        mixed = [(128, 0, 4, 64), (256, 256, 8, 256), (64, 0, 12, 64)]
        per_seq_ctx = 640
        # two rounds over the whole plan, each with half the timed runs: a point's median then spans
        # two moments minutes apart. On a shared VM the machine's speed moves by up to 25 % within
        # tens of seconds (a neighbour on the sibling hyperthread); one second of samples per point
        # would fit that moment's speed into the profile.
        rounds = 2
        reps = {"warmup": 1, "runs": 3, "max_runs": 8, "min_time_s": 0.5}
        dreps = {"warmup": 3, "runs": 8, "max_runs": 32, "min_time_s": 0.5}

    single: list[dict] = []
    for p in prefill:
        if p <= max_single:
            single.append(probe_spec(f"prefill-{p}", "prefill", p=p, **reps))
    for p, cp in chunks:
        if cp + p <= max_single:
            single.append(probe_spec(f"prefill-{p}@{cp}", "prefill", p=p, cp=cp, **reps))
    decode_room = dreps["warmup"] + dreps["max_runs"]
    for c in single_decode:
        if c + decode_room <= n_ctx_train:
            single.append(probe_spec(f"decode-1@{c}", "decode", b=1, cd=c, **dreps))
    if not single:
        raise ProbeError(f"the model's context ({n_ctx_train} tokens) is too short for the smallest probe")
    single_ctx = max(
        [pr["prefill_context"] + pr["prefill_tokens"] for pr in single]
        + [pr["decode_context"] + decode_room for pr in single if pr["decode_batch"]]
    )

    per_seq_ctx = min(per_seq_ctx, n_ctx_train)
    batched: list[dict] = []
    for b, c in batched_decode:
        if c + decode_room <= per_seq_ctx:
            batched.append(probe_spec(f"decode-{b}@{c}", "decode", b=b, cd=c, **dreps))
    mixed_probes: list[dict] = []
    for p, cp, b, c in mixed:
        if cp + p <= per_seq_ctx and c + reps["warmup"] + reps["max_runs"] <= per_seq_ctx:
            mixed_probes.append(probe_spec(f"mixed-{p}@{cp}+{b}x{c}", "mixed", p=p, cp=cp, b=b, cd=c, **reps))
    n_seq = 16
    sessions = [
        {"name": "single", "n_ctx": single_ctx, "n_batch": max_single, "n_ubatch": min(512, max_single),
         "n_seq_max": 1, "kv_unified": False, "probes": single},
    ]
    if batched or mixed_probes:
        sessions.append(
            {"name": "batched", "n_ctx": n_seq * per_seq_ctx, "n_batch": max_single,
             "n_ubatch": min(512, max_single), "n_seq_max": n_seq, "kv_unified": False,
             "probes": batched + mixed_probes}
        )
    return {
        "model_path": str(Path(model_path).resolve()),
        "n_threads": int(n_threads),
        "n_gpu_layers": int(n_gpu_layers),
        "seed": int(seed),
        "warm_loads": 2,
        "rounds": rounds,
        "sessions": sessions,
    }


def planned_limits(session: dict) -> ContextLimits:
    """The sizes a session asks llama.cpp for (the child re-checks against what it grants)."""
    n_ctx, n_seq = int(session["n_ctx"]), int(session["n_seq_max"])
    unified = bool(session.get("kv_unified", False))
    return ContextLimits(
        n_ctx=n_ctx, n_ctx_seq=n_ctx if unified else n_ctx // n_seq, n_batch=min(int(session["n_batch"]), n_ctx),
        n_seq_max=n_seq, kv_unified=unified,
    )


def validate_plan(plan: dict) -> None:
    """Refuse, before starting llama.cpp, any probe that does not fit its context."""
    for session in plan["sessions"]:
        limits = planned_limits(session)
        for probe in session["probes"]:
            why = probe_fits(probe, limits)
            if why:
                raise ProbeError(f"probe {probe['id']} does not fit context '{session['name']}': {why}")


def count_probes(plan: dict) -> int:
    """Point events the plan emits: every probe once per round."""
    return sum(len(s["probes"]) for s in plan["sessions"]) * int(plan.get("rounds", 1))


def merge_rounds(events: list[dict], n_threads: int) -> list[dict]:
    """One point event per (session, id) from the per-round events of a plan run in rounds.

    The samples of every round are pooled and summarized again (`probe_worker.summarize`: median
    of the undisturbed runs, against the best CPU share among the pooled runs), so a point's value
    spans minutes of the machine instead of one second of it; the mean decode context is weighted
    by each round's runs. A plan with one round passes through unchanged. Events that already pool
    several rounds (a profile's stored points, for `calibrate --extend`) count with their rounds."""
    from calibrate.probe_worker import summarize

    groups: dict[tuple[str, str], list[dict]] = {}
    for e in events:
        groups.setdefault((e.get("session", ""), e["id"]), []).append(e)
    merged = []
    for group in groups.values():
        if len(group) == 1:
            merged.append(group[0])
            continue
        samples = [x for e in group for x in e["samples_s"]]
        cpu = [x for e in group for x in e.get("cpu_s", [])]
        runs = sum(int(e["runs"]) for e in group)
        stats = summarize(samples, cpu if len(cpu) == len(samples) else [], n_threads)
        context = sum(float(e["decode_context"]) * int(e["runs"]) for e in group) / runs
        rounds = sum(int(e.get("rounds", 1)) for e in group)
        merged.append({**group[0], **stats, "runs": runs, "decode_context": context, "rounds": rounds})
    return merged


# ---- running in a child process ---------------------------------------------------------------------


def _crash_reason(stderr_text: str) -> str:
    """The most telling line a dying llama.cpp left on stderr (a GGML_ASSERT, an error), if any."""
    lines = [ln.strip() for ln in stderr_text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "GGML_ASSERT" in ln or "GGML_ABORT" in ln or "error" in ln.lower():
            return ln
    return lines[-1] if lines else ""


def run_plan(
    plan: dict,
    *,
    on_event: Callable[[dict], None] | None = None,
    timeout_s: float = 900.0,
    validate: bool = True,
) -> ProbeRun:
    """Run the plan in a fresh child process; return what it measured.

    A refused size, a llama.cpp error, a crash of the child (GGML_ASSERT abort, segfault) or a
    run longer than `timeout_s` raises `ProbeError` naming the probe that was running.

    A crash of CRASH_SIGNALS (segfault, illegal instruction, bus error) is run once more with
    llama.cpp's extra weight buffers off (calibrate.llama_buffers: the AMX and CPU_REPACK buffers,
    which crash on some machines), and the run says so (`ProbeRun.extra_bufts_off`).
    """
    try:
        return _run_plan_once(plan, on_event=on_event, timeout_s=timeout_s, validate=validate)
    except ProbeError as e:
        if e.signal not in CRASH_SIGNALS or plan.get("extra_bufts") is False:
            raise
        run = _run_plan_once({**plan, "extra_bufts": False}, on_event=on_event, timeout_s=timeout_s,
                             validate=False)
        return replace(run, extra_bufts_off=f"with its extra weight buffers on, {e}")


def _run_plan_once(plan: dict, *, on_event, timeout_s: float, validate: bool) -> ProbeRun:
    if validate:
        validate_plan(plan)
    env = dict(os.environ)
    env["GGML_NO_BACKTRACE"] = "1"  # ggml_abort would otherwise try to attach a debugger
    t_start = time.perf_counter()
    point_events: list[dict] = []
    contexts: list[dict] = []
    load: dict = {}
    current = "model load"
    error: str | None = None
    with tempfile.TemporaryFile() as err_f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "calibrate.probe_worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err_f, env=env, text=True,
        )
        timed_out = threading.Event()

        def kill_on_timeout() -> None:
            timed_out.set()
            proc.kill()

        timer = threading.Timer(timeout_s, kill_on_timeout)
        timer.start()
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(json.dumps(plan))
            proc.stdin.close()
            for line in proc.stdout:
                event = json.loads(line)
                kind = event.get("event")
                if kind == "start":
                    current = f"probe {event['id']}"
                elif kind == "point":
                    point_events.append(event)
                elif kind == "load":
                    load = event
                elif kind == "context":
                    contexts.append({k: v for k, v in event.items() if k != "event"})
                elif kind == "error":
                    error = event["message"]
                if on_event is not None:
                    on_event(event)
            returncode = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        finally:
            timer.cancel()
        err_f.seek(0)
        stderr_text = err_f.read().decode(errors="replace")
    if timed_out.is_set():
        raise ProbeError(f"llama.cpp probes did not finish within {timeout_s:.0f} s (stopped during {current})")
    if returncode < 0:
        reason = _crash_reason(stderr_text)
        raise ProbeError(
            f"llama.cpp crashed ({signal_name(returncode)}) during {current}" + (f": {reason}" if reason else ""),
            signal=signal_name(returncode),
        )
    if error is not None:
        raise ProbeError(f"llama.cpp probes failed during {current}: {error}")
    if returncode != 0:
        raise ProbeError(f"probe process exited with status {returncode} during {current}: {_crash_reason(stderr_text)}")
    return ProbeRun(
        points=tuple(ProbePoint.from_event(e) for e in merge_rounds(point_events, int(plan["n_threads"]))),
        load_cold_s=float(load.get("cold_s", float("nan"))),
        load_warm_s=tuple(load.get("warm_s", ())),
        contexts=tuple(contexts),
        llama_system_info=load.get("llama_system_info", ""),
        wall_s=time.perf_counter() - t_start,
        llama_cpp_version=load.get("llama_cpp_version", ""),
        plan_summary={"n_threads": plan["n_threads"], "n_gpu_layers": plan["n_gpu_layers"], "seed": plan["seed"],
                      "probes": count_probes(plan), "rounds": int(plan.get("rounds", 1))},
    )
