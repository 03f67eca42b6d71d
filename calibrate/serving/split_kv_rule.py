"""The ship rule of the capped split-KV decode term (sim.cost.split_kv: SGLang's triton decode kernel, whose
serial per-program loop makes a small batch's TPOT grow with the context), its recorded subset figures, and
the report section (issue 38; docs/floor-structure.md).

The term has no fitted constant: the split cap (8) is read from SGLang's code and tau from a published
kernel sweep outside the serving corpus (sim.cost.split_kv module docstring). What ships is the corpus
replays' reading of `--attention-backend triton` (sim.bench.corpus `_FLAGS`), so the rule compares the same
subset replayed with and without it. Written (2026-12-06) before either subset run's figures were seen."""

from __future__ import annotations

from calibrate.serving.floor import held_out_gain, pct

#: the rule, as the report prints it
SHIP_RULE = (
    "The capped split-KV term ships (the corpus replays read SGLang's `--attention-backend triton` as "
    "decode_kv_splits 8, sim.bench.corpus) when, on one subset replay (`python benchmarks/serving_fit.py --curves "
    "REGEX`) holding every SGLang curve that sets `--attention-backend triton` and the SGLang curves of at least "
    "two other sources, the SGLang family's TPOT/ITL median |error| on the run's `held out by source:` line is "
    "smaller with the term than on the same subset without it, and its output-throughput median no larger (calibrate/serving/floor.py "
    "`held_out_gain`). Nothing in the term is chosen on held-out figures (split cap from SGLang's code, tau from "
    "PR #21775's kernel sweep). Written before either run's figures were seen; which printed line it reads "
    "(`held out by source:`, not `shippable terms ... held out by source:`) was fixed after the run with the term "
    "and before the run without it.")

#: the subset runs the decision reads: held-out-by-source medians (%) of the SGLang rows, without the term (the
#: tree before it) and with it, copied by hand from the two runs' printed lines. Not recomputed by the report:
#: its full replay runs without the term (it does not ship: the corpus does not read the flag, sim.bench.corpus
#: UNSHIPPED_FLAGS), and re-judging it takes both subset runs again. `runs` names the trees they ran on and the
#: commit that recorded them (the report prints it; figures without it are refused). None until both are recorded.
RECORDED: dict | None = {
    "subset": "glm-4.7-flash|redhat-h200-llama-3.3-70b-fp8-sglang|sglang-datacrunch|ix-api-b300-sglang",
    "date": "2026-12-06, 761 rows in 68 load points, 4 SGLang sources",
    "runs": {"with": "commit 61e8f7e (the term added, the corpus reading `--attention-backend triton` as "
                     "decode_kv_splits 8)",
             "without": "the tree before it (61e8f7e's parent, 3e1cdd8)",
             "recorded_in": "commit 856352b"},
    "without": {"ttft_p50": 9.5, "tpot_itl": 27.0, "output_tps": 16.6},
    "with": {"ttft_p50": 9.5, "tpot_itl": 27.0, "output_tps": 16.6},
    # the same runs' `shippable terms (floor, request overhead), held out by source:` line (not the rule's)
    "shippable_without": {"ttft_p50": 10.0, "tpot_itl": 27.8, "output_tps": 33.5},
    "shippable_with": {"ttft_p50": 10.0, "tpot_itl": 25.9, "output_tps": 20.0},
}


def ships(recorded: dict | None = None) -> bool:
    """Whether the term ships under SHIP_RULE on `recorded` (default RECORDED; False without figures)."""
    r = RECORDED if recorded is None else recorded
    if not r:
        return False
    w, wo = r["with"], r["without"]
    return held_out_gain(w["tpot_itl"], wo["tpot_itl"], w["output_tps"], wo["output_tps"])


def split_kv_markdown(recorded: dict | None = None) -> list[str]:
    """The report's section: the rule, the recorded figures with the runs they come from, and the decision."""
    r = RECORDED if recorded is None else recorded
    lines = ["## Capped split-KV decode attention (SGLang's triton backend)", "",
             "sim.cost.split_kv: at small batch SGLang's triton decode kernel walks each sequence's keys in at most 8 "
             "serial program loops, so TPOT grows by n_attention_layers x context / 8 x tau (tau = 97.6 ns per "
             "key, PR #21775's batch-1 sweep on H100; not fitted). " + SHIP_RULE, ""]
    if not r:
        return lines + ["No subset figures recorded: the term does not ship.", ""]
    runs = r.get("runs") or {}
    if not all(runs.get(k) for k in ("with", "without", "recorded_in")):
        raise ValueError("split-KV subset figures without the runs they were copied from (RECORDED['runs']: "
                         "with, without, recorded_in)")
    lines += [f"Recorded figures, not recomputed by this report (its replay above runs without the term, which "
              f"does not ship): two runs of `python benchmarks/serving_fit.py --curves '{r['subset']}'` ({r['date']}), "
              f"with the term on {runs['with']} and without it on {runs['without']}, copied by hand into "
              f"calibrate/serving/split_kv_rule.py RECORDED in {runs['recorded_in']}. SGLang rows held out by source:",
              "", "| metric | without the term | with it |", "|---|---|---|"]
    for m in ("ttft_p50", "tpot_itl", "output_tps"):
        lines.append(f"| {m} | {pct(r['without'].get(m))} | {pct(r['with'].get(m))} |")
    if "shippable_with" in r:
        lines += ["", "The same runs' shippable-terms line (floor and front end only; not the rule's):", "",
                  "| metric | without the term | with it |", "|---|---|---|"]
        for m in ("ttft_p50", "tpot_itl", "output_tps"):
            lines.append(f"| {m} | {pct(r['shippable_without'].get(m))} | {pct(r['shippable_with'].get(m))} |")
    return lines + ["", f"Ships: {'yes' if ships(r) else 'no'}.", ""]
