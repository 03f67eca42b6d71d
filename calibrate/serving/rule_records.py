"""Report sections for ship rules decided on subset runs whose figures are recorded in a file, not recomputed
by the full serving fit (issue 38): SGLang's eager-prefill launch floor (calibrate/serving/eagerlaunch.py,
figures in benchmarks/serving/eagerlaunch_rule.json). Called from calibrate/serving/report.py; the split-KV
rule, recorded in Python, prints its own section (calibrate/serving/split_kv_rule.py); the floor per FFN kind's
record (benchmarks/serving/floorkind_rule.json, printed when the fit runs without --floor-kind) is printed in the
layer floor's section (calibrate/serving/floorkind_report.py)."""

from __future__ import annotations

from calibrate.serving.floor import pct


def eagerlaunch_markdown(rec: dict | None = None) -> list[str]:
    """The eager-prefill launch floor's section: the term, its rule, the recorded runs (`rec`, default the
    committed record, eagerlaunch.load_record) and the rule's verdict beside what the preset runs."""
    from calibrate.serving import eagerlaunch as el
    from sim.catalog.engine_config import load_engine

    rec = el.load_record() if rec is None else rec
    r1, r2 = rec["runs"]["run1"], rec["runs"]["run2_dense_guard"]
    gain, loss = el.MIN_TTFT_GAIN_PT, el.MAX_OTHER_LOSS_PT
    field, preset = rec["decides"]["field"], rec["decides"]["preset"]
    lines = ["## SGLang's eager-prefill launch floor (calibrate/serving/eagerlaunch.py)", "",
             "sim.cost.eager_launches: an eager SGLang extend forward lasts at least its kernel launches (counted "
             "per layer kind from the model's architecture) x a per-launch host time, "
             f"{el.CITED_US_PER_LAUNCH:.1f} us, cited from sgl-project/sglang PR #12160 (82.6 ms over DeepSeek-V3's "
             "count); not fitted. Ship rule (committed before either run): on for the SGLang preset iff, held out "
             f"by source, run 1's TTFT p50 median |error| falls by at least {gain:g} points, its TTFT p99 rises by "
             f"at most {2 * loss:g}, its TPOT/ITL and output throughput each by at most {loss:g}, and run 2's (the "
             f"dense guard's) TTFT p50 rises by at most {2 * loss:g}; otherwise 0.", "",
             f"Recorded figures, not recomputed by this report (its replay runs the preset as it ships): "
             f"benchmarks/serving/eagerlaunch_rule.json ({rec['date']}; rule committed in "
             f"{rec['rule_committed_in']}; figures recorded in {', '.join(rec['recorded_in'])}). Before: "
             f"{rec.get('before', 'the term off')}; after: {rec.get('after', 'the term on')}.", "",
             "| run | command | rows | load points | metric | before | after |", "|---|---|---|---|---|---|---|"]
    for name, r in (("1", r1), ("2 (dense guard)", r2)):
        cmd = r["command"].replace("|", "\\|")  # a pipe inside a table cell, code span or not, is escaped
        head = f"| {name} | `{cmd}` | {r.get('rows', '-')} | {r.get('load_points', '-')} |"
        for i, m in enumerate(m for m in el.METRICS if m in r["before"]):
            lines.append(f"{head if i == 0 else '| | | | |'} {m} | {pct(r['before'][m])} | {pct(r['after'][m])} |")
    value = el.recorded_value(rec)
    runs = getattr(load_engine(preset), field)
    return lines + ["", f"The rule gives {field} {value:g} ({'on' if value else 'off'}); the {preset} preset runs "
                        f"{runs:g}{'' if runs == value else ' (NOT what the rule gives)'}.", ""]


def eager_backends_markdown(rec: dict | None = None) -> list[str]:
    """The per-backend eager launch counts' section (calibrate/serving/eager_backends_rule.py): the rule, the
    recorded subset run off and on (`rec`, default the committed record) and its verdict beside what the
    EngineConfig default runs."""
    from calibrate.serving import eager_backends_rule as eb
    from sim.catalog.engine_config import EngineConfig

    rec = eb.load_record() if rec is None else rec
    gain, loss = eb.MIN_TTFT_GAIN_PT, eb.MAX_OTHER_LOSS_PT
    cmd = rec["command"].replace("|", "\\|")
    lines = ["## SGLang's eager launch count per fused backend (calibrate/serving/eager_backends_rule.py)", "",
             "sim.cost.eager_backends: the eager prompt forward's launch count under flashinfer's fused trtllm-gen "
             "MoE and all-reduce + RMSNorm fusion (from the server's flags, or chosen by SGLang itself for "
             "DeepSeek-V3 on compute capability 10), counted from SGLang's source; not fitted. Ship rule (committed "
             f"before the run): on iff, held out by source, TTFT p50 falls by at least {gain:g} points, TTFT p99 rises "
             f"by at most {2 * loss:g}, TPOT/ITL and output throughput each by at most {loss:g}, and the SGLang "
             "cookbook's own held-out TTFT p50 does not rise.", "",
             f"Recorded figures (benchmarks/serving/eager_backends_rule.json, {rec['date']}; rule committed in "
             f"{rec['rule_committed_in']}; figures in {', '.join(rec['recorded_in'])}): `{cmd}` "
             f"({rec.get('rows', '-')} rows, {rec.get('load_points', '-')} load points).", "",
             "| metric | off | on |", "|---|---|---|"]
    for m in eb.METRICS:
        lines.append(f"| {m} | {pct(rec['off'][m])} | {pct(rec['on'][m])} |")
    lines.append(f"| cookbook ttft_p50 | {pct(rec['cookbook_ttft_p50']['off'])} | "
                 f"{pct(rec['cookbook_ttft_p50']['on'])} |")
    verdict = eb.recorded_ships(rec)
    runs = EngineConfig.model_fields[rec["decides"]["field"]].default
    return lines + ["", f"The rule gives {'on' if verdict else 'off'}; EngineConfig.{rec['decides']['field']} "
                        f"defaults to {runs}{'' if runs == verdict else ' (NOT what the rule gives)'}.", ""]


def recorded_rules_markdown() -> list[str]:
    """Every section of this module, in the report's order."""
    return eagerlaunch_markdown() + eager_backends_markdown()
