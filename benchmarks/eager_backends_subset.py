"""The subset run of the per-backend eager launch counts' ship rule (calibrate/serving/eager_backends_rule.py):
replays CURVES with the serving fit (calibrate/serving/fit.py, held out by source) and prints its summary lines plus
the held-out-by-source median |error| per source. Without `--off` it replays with the per-backend counts on for
every engine (EngineConfig.eager_launch_backends, off by default since the rule failed) and `--off` with the generic
count everywhere, each by wrapping `sim.cost.eager_backends.deployment_backends` in this process: the switch lives
here, not in sim/. Replays in one process (jobs 1), with no replay cache (the two modes share a tree fingerprint).

    nice python benchmarks/eager_backends_subset.py [--off]
"""

import argparse
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: SGLang's DeepSeek-V3-architecture curves of the cookbook and SemiAnalysis InferenceX (13 curves)
CURVES = r"sglang-cookbook-deepseek|ix-api-.*-sglang-dsr1"
TARGETS = {"tpot_itl": 10.0, "output_tps": 10.0, "ttft_p50": 20.0, "knee": 15.0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--off", action="store_true", help="the generic launch count everywhere")
    ap.add_argument("--curves", default=CURVES)
    a = ap.parse_args(argv)
    from calibrate import serving_fit as sf
    from calibrate.serving.fit import summarize

    try:
        import sim.cost.eager_backends as eb
    except ImportError:  # a tree before the per-backend counts: always off
        eb = None
    if eb is not None and a.off:
        eb.deployment_backends = lambda *args, **kw: None  # None: the generic path (no fused backend)
    elif eb is not None:  # on: the deployment's fused backends whatever the engine's (default-off) switch says
        counted = eb.deployment_backends
        eb.deployment_backends = lambda model, engine, hw=None, quant=None: counted(
            model, engine.model_copy(update={"eager_launch_backends": True}), hw, quant)
    t0 = time.perf_counter()
    pat = re.compile(a.curves)
    rows = [r for r in sf.load_corpus() if pat.search(r["curve_id"])]
    print(f"mode {'off' if a.off else 'on'}; {len({r['curve_id'] for r in rows})} curves, {len(rows)} rows", flush=True)
    res = sf.run(rows, cache=sf.Cache(None), jobs=1)
    for line in sf.summary_lines(res, TARGETS):
        print(line)
    recs = res["cv"]["source"]["records"]
    for src in sorted({r["source"] for r in recs}):
        s = summarize([r for r in recs if r["source"] == src])
        print(f"held out by source, {src}: " + " · ".join(
            f"{m} {s[m]['median_abs_pct']}% (signed {s[m]['median_signed_pct']}%)" for m in
            ("ttft_p50", "ttft_p99", "tpot_itl", "output_tps") if m in s))
    print(f"{round(time.perf_counter() - t0, 1)} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
