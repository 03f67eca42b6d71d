"""The serving report's split of a TPOT/ITL miss into the decode step and the prompt-step stall (issue 38;
docs/cost-model.md 'Decode under load: the step and the prefill stall').

Why. A streaming client's inter-token latencies are of two kinds: most are one decode step of the running
batch, and some also hold a prompt (extend) step that the engine ran between two decode steps (SGLang runs
a prefill batch apart from the decodes unless `--enable-mixed-chunk`; vLLM V1 chunks it into the step).
So, per load point, with the median ITL a plain decode step as long as fewer than half of the gaps hold a
prompt step,

    step_ms  = ITL median                       [the decode step itself]
    stall_ms = ITL mean - ITL median            [prompt-step time spread over every streamed token]

and the miss of the mean ITL (what TPOT and output throughput follow) splits exactly into

    pred ITL mean - meas ITL mean = (pred step - meas step) + (pred stall - meas stall).

A decode-step cost term (sim.cost: MoE expert reads, kernel floors, attention) moves the first part; the
second is the price of the prompt steps (sim.cost.eager_prefill and the prefill roofline) and of how often
they run. This module only reads the residual records the fit already made (no replay): it changes no
prediction. The table lists the load points whose ITL-mean miss is past `MIN_MISS` and prints the stall's
share of each miss, so that a term is judged on the part it can move."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

#: load points whose held-out ITL-mean miss is at least this (|pred / meas - 1|) are listed
MIN_MISS = 0.15
_STEP, _MEAN = ("itl_ms", "median"), ("itl_ms", "mean")


def decode_split(records: list[dict], min_miss: float = MIN_MISS) -> list[dict]:
    """Per load point with measured and predicted ITL median and mean, whose ITL-mean miss is past `min_miss`:
    {curve_id, source, load, itl_mean_error, step_error, step_miss_ms, stall_miss_ms, stall_meas_ms,
    stall_pred_ms, stall_share} (module docstring; stall_share = stall miss / total miss, the sum of the
    two misses being the total). Sorted by curve and load."""
    by_point: dict[str, dict] = defaultdict(dict)
    for r in records:
        if (r["quantity"], r["statistic"]) in (_STEP, _MEAN) and r.get("predicted") is not None and r["measured"] > 0:
            by_point[r["point"]][r["statistic"]] = r
    out = []
    for pt, d in by_point.items():
        if "median" not in d or "mean" not in d:
            continue
        med, mean = d["median"], d["mean"]
        total = mean["predicted"] - mean["measured"]
        if abs(total / mean["measured"]) < min_miss:
            continue
        step = med["predicted"] - med["measured"]
        stall_meas, stall_pred = mean["measured"] - med["measured"], mean["predicted"] - med["predicted"]
        share = (stall_pred - stall_meas) / total + 0.0  # (+ 0.0: a zero share prints as 0%, not -0%)
        out.append({"curve_id": mean["curve_id"], "source": mean["source"], "load": mean["load"],
                    "itl_mean_error": total / mean["measured"], "step_error": step / med["measured"],
                    "step_miss_ms": step, "stall_miss_ms": stall_pred - stall_meas, "stall_meas_ms": stall_meas,
                    "stall_pred_ms": stall_pred, "stall_share": share})
    return sorted(out, key=lambda x: (x["curve_id"], float(x["load"])))


def decode_split_markdown(records: list[dict]) -> list[str]:
    """The report's section (held-out-by-source records): the table of `decode_split` and the median share."""
    rows = decode_split(records)
    L = ["", "## TPOT/ITL misses: the decode step and the prompt-step stall (held out by source)", "",
         "Load points whose mean ITL misses by 15% or more, split exactly into the decode step's miss (the median "
         "ITL) and the stall's (mean - median ITL: prompt steps run between decode steps, spread over every "
         "token; calibrate/serving/decode_split.py). A decode-step term can only move the first part.", "",
         "| curve | load | ITL mean | ITL median (step) | stall measured / predicted [ms] | stall share of the miss |",
         "|---|---|---|---|---|---|"]
    for r in rows:
        L.append(f"| {r['curve_id']} | {r['load']:g} | {100 * r['itl_mean_error']:+.0f}% | "
                 f"{100 * r['step_error']:+.0f}% | {r['stall_meas_ms']:.1f} / {r['stall_pred_ms']:.1f} | "
                 f"{100 * r['stall_share']:.0f}% |")
    if rows:
        L += ["", f"Median stall share over these {len(rows)} points: "
                  f"{100 * float(np.median([r['stall_share'] for r in rows])):.0f}%."]
    else:
        L += ["", "No load point misses its mean ITL by 15% or more."]
    return L
