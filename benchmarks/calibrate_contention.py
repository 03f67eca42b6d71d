"""The quick calibration of the tiny GGUF (tests/test_calibrate_cli.py's `calibrated` fixture) under
induced CPU contention: how far the held-out probe points land, and what each timed run's
disturbance signals say.

    PYTHONPATH=. python benchmarks/calibrate_contention.py --trials 3 --busy 2 --busy-after 2 --dump runs.json

`--busy K` starts K busy-loop processes (nice 0) `--busy-after` seconds after the calibration
starts (0: before it), `--pin CPU` pins them to one CPU. Each trial prints the held-out points'
median |log(predicted / measured)| (the test fails at log 2 = 0.693), whether it would pass, the training
points' median and the KV padding the fit priced the probes with. Run it on two trees, `--trials 1`
alternately, to compare a change (docs/calibration.md, the CPU KV-padding rule).
`--dump` writes every timed run's wall and CPU seconds, runqueue wait (/proc/self/task/*/schedstat),
involuntary context switches and machine-wide steal, for `benchmarks/calibrate_signals.py`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

BUSY_LOOP = "while True: pass"


def start_busy(k: int, pin: int | None) -> list[subprocess.Popen]:
    procs = []
    for _ in range(k):
        cmd = [sys.executable, "-c", BUSY_LOOP]
        if pin is not None:
            cmd = ["taskset", "-c", str(pin), *cmd]
        procs.append(subprocess.Popen(cmd))
    return procs


def stop_busy(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
        p.wait()


def one_trial(model: Path, busy: int, busy_after: float, pin: int | None) -> dict:
    import calibrate.calibration as cal
    from sim.catalog.lookup import get_model

    real_build = cal.build_plan
    cal.build_plan = lambda *a, **k: {**real_build(*a, **k), "record_signals": True}
    points: list[dict] = []
    procs: list[subprocess.Popen] = []
    timer = None
    if busy and busy_after <= 0:
        procs = start_busy(busy, pin)
    elif busy:
        timer = threading.Timer(busy_after, lambda: procs.extend(start_busy(busy, pin)))
        timer.start()
    try:
        spec = get_model(str(model))
        res = cal.calibrate_model(model, name="tiny-box", spec=spec, quant=spec.quant("fp16"), quick=True, threads=1,
                                  write=False, force=True,
                                  on_event=lambda e: points.append(e) if e.get("event") == "point" else None)
    finally:
        if timer:
            timer.cancel()
        stop_busy(procs)
        cal.build_plan = real_build
    recs = res.profile.calibration["probe_points"]
    ratios = {p["id"]: math.log(p["predicted_s"] / p["measured_s"]) for p in recs if p["split"] == "heldout"}
    med = statistics.median(abs(r) for r in ratios.values())
    train = statistics.median(abs(math.log(p["predicted_s"] / p["measured_s"])) for p in recs if p["split"] == "train")
    raw = res.profile.calibration["raw_probes"]
    return {"heldout_median_abs_log": med, "train_median_abs_log": train,
            "kv_pad": res.profile.calibration["fit"]["attention_kv_padding"], "raw": raw, "simd": res.profile.calibration["machine"].get("simd", []), "passes": med < math.log(2.0), "heldout_log_ratios": ratios,
            "undisturbed": {p["id"]: f"{p['undisturbed_runs']}/{p['runs']}" for p in recs},
            "points": points}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--busy", type=int, default=0)
    ap.add_argument("--busy-after", type=float, default=0.0)
    ap.add_argument("--pin", type=int, default=None)
    ap.add_argument("--dump", type=Path, default=None)
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    from calibrate.tiny_gguf import write_tiny_gguf

    model = write_tiny_gguf(Path(tempfile.mkdtemp()) / "tiny.gguf", n_ctx=2048, seed=0)
    trials = []
    for i in range(args.trials):
        t = one_trial(model, args.busy, args.busy_after, args.pin)
        trials.append(t)
        worst = sorted(t["heldout_log_ratios"].items(), key=lambda kv: -abs(kv[1]))[:3]
        print(f"{args.label} trial {i}: busy={args.busy} after={args.busy_after}s pin={args.pin} "
              f"heldout median |log ratio| {t['heldout_median_abs_log']:.3f} "
              f"({'pass' if t['passes'] else 'FAIL'}; train {t['train_median_abs_log']:.3f}, KV padding "
              f"{t['kv_pad']}); worst {', '.join(f'{k} {v:+.2f}' for k, v in worst)}",
              flush=True)
    print(f"{args.label} passes {sum(t['passes'] for t in trials)}/{len(trials)}; load {os.getloadavg()[0]:.2f}")
    if args.dump:
        args.dump.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "trials": trials}))


if __name__ == "__main__":
    main()
