"""Replays the timed runs of `benchmarks/calibrate_contention.py --dump` files through other rules for
a point's kept value, fits each trial again, and prints how far the held-out points land (the
quantity tests/test_calibrate_cli.py bounds by log 2).

    PYTHONPATH=. python benchmarks/calibrate_statistics.py /tmp/cc2/*.json

The replay keeps the runs the worker took (a rule that would have asked for more runs cannot get
them here), so it ranks the rules' statistics, not their re-sampling.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import tempfile
from pathlib import Path

from calibrate import probe_worker as pw
from calibrate.calibration import _PLACEHOLDER, probe_kv_padding
from calibrate.fit import Observation, fit_cost_params, int8_speedup_for, physical_bounds
from calibrate.tiny_gguf import write_tiny_gguf
from sim.catalog.hardware import load_profile
from sim.catalog.lookup import get_model
from sim.cost.roofline import CostModel


def _share_kept(wall, cpu, ref):
    """The runs the worker's CPU-share rule keeps (probe_worker.undisturbed without the on-CPU floor), else all."""
    return [w for w, k in zip(wall, pw.undisturbed(wall, cpu, 1, ref)) if k] or wall


def rule_share(wall, cpu, ref):
    """The worker's rule before this change: median of the runs with CPU share >= 0.85 x best."""
    s = _share_kept(wall, cpu, ref)
    return statistics.median(s)


def rule_current(wall, cpu, ref):
    """The worker's rule now: calibrate.probe_worker.summarize(on_cpu=True)."""
    return pw.summarize(wall, cpu, 1, ref, on_cpu=True)["median_s"]


def rule_cpu_floor(k):
    def rule(wall, cpu, ref):
        saved = pw.ON_CPU_SLOWDOWN
        pw.ON_CPU_SLOWDOWN = k
        try:
            return pw.summarize(wall, cpu, 1, ref, on_cpu=True)["median_s"]
        finally:
            pw.ON_CPU_SLOWDOWN = saved
    rule.__doc__ = f"the worker's rule with ON_CPU_SLOWDOWN = {k}"
    return rule


def rule_p25(wall, cpu, ref):
    """Lower quartile of the share-kept runs."""
    s = _share_kept(wall, cpu, ref)
    return statistics.quantiles(s, n=4, method="inclusive")[0] if len(s) > 1 else s[0]


RULES = {"share (before)": rule_share, "worker now": rule_current, "p25 of share-kept": rule_p25,
         **{f"cpu <= {k} x min": rule_cpu_floor(k) for k in (1.15, 1.25, 1.4)}}


def heldout_error(trial, rule, spec, quant) -> float:
    obs, ref = [], 0.0
    for p in trial["points"]:
        obs.append(Observation(p["id"], p["kind"], p["prefill_tokens"], p["prefill_context"], p["decode_batch"],
                               p["decode_context"], rule(p["samples_s"], p["cpu_s"], ref)))
        ref = max([ref, *pw.cpu_shares(p["samples_s"], p["cpu_s"], 1)])
    # the padding the calibrator prices these probes with: they ran on this CPU VM, flash attention on (auto), so
    # none (calibrate.calibration.probe_kv_padding; a kind-cpu profile stands for the machine)
    cost = CostModel(spec, quant, _PLACEHOLDER, kv_pad=probe_kv_padding("llama.cpp", load_profile("cpu-x86-generic"), spec))
    raw = trial["raw"]
    bounds = physical_bounds(raw["memory_bandwidth_bytes_per_s"], raw["matmul_fp32_flops_per_s"],
                             int8_speedup=int8_speedup_for(trial.get("simd") or []))
    fit = fit_cost_params(cost, obs, bounds, seed=0)
    errs = [abs(math.log(pred / o.measured_s)) for o, pred, h in zip(obs, fit.predicted_s, fit.heldout) if h]
    return statistics.median(errs)


def main(paths: list[str]) -> None:
    model = write_tiny_gguf(Path(tempfile.mkdtemp()) / "tiny.gguf", n_ctx=2048, seed=0)
    spec = get_model(str(model))
    quant = spec.quant("fp16")
    trials = [(Path(p).stem, t) for p in paths for t in json.load(open(p))["trials"] if "raw" in t]
    print(f"{len(trials)} trials; held-out median |log ratio| per trial (FAIL at >= {math.log(2):.3f})")
    for name, rule in RULES.items():
        errs = [heldout_error(t, rule, spec, quant) for _, t in trials]
        fails = sum(e >= math.log(2) for e in errs)
        print(f"  {name:22s} passes {len(errs) - fails}/{len(errs)}  median {statistics.median(errs):.3f}  "
              f"max {max(errs):.3f}  " + " ".join(f"{lab}:{e:.2f}" for (lab, _), e in zip(trials, errs)))




def pooled_floor_error(paths: list[str]) -> None:
    """The held-out error when every point gets its quietest speed over all dumped trials (the 10th
    percentile of its pooled runs): what is left when no disturbance reaches the medians at all."""
    import calibrate_signals  # noqa: E402  (benchmarks/ sibling)

    model = write_tiny_gguf(Path(tempfile.mkdtemp()) / "tiny.gguf", n_ctx=2048, seed=0)
    spec = get_model(str(model))
    quant = spec.quant("fp16")
    trials = [t for p in paths for t in json.load(open(p))["trials"] if "raw" in t]
    pooled: dict[str, list[float]] = {}
    for t in trials:
        for p in t["points"]:
            pooled.setdefault(p["id"], []).extend(p["samples_s"])
    for q in (0.1, 0.25, 0.5):
        base = trials[0]
        quiet = {**base, "points": [{**p, "samples_s": [calibrate_signals.pct(pooled[p["id"]], q)],
                                     "cpu_s": [calibrate_signals.pct(pooled[p["id"]], q)]} for p in base["points"]]}
        errs = [heldout_error({**quiet, "raw": t["raw"], "simd": t.get("simd")}, rule_share, spec, quant) for t in trials]
        print(f"every point at its pooled {q:.0%} quantile: held-out median |log ratio| over the trials' raw peaks "
              f"median {statistics.median(errs):.3f} (min {min(errs):.3f}, max {max(errs):.3f})")


if __name__ == "__main__":
    main(sys.argv[1:])
    pooled_floor_error(sys.argv[1:])
