"""The report of benchmarks/fidelity.py: benchmarks/fidelity.md from the figures a run measured (the
cases and the run's meta, as `--json` saves them; `fidelity.py --render` rewrites the report from
that JSON alone). Formatting only: every number comes from the measured cases."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from calibrate.check import DRIFT_TOLERANCE, ProfileCheck  # noqa: E402
from calibrate.replay.compare import METRICS  # noqa: E402

TARGETS = {m[0]: m[4] for m in METRICS if m[4] is not None}
SPEED_MARGIN = 0.05  # each prediction's band: the same profile on a machine 5 % faster and slower (the
# size of the drift the machine checks see within minutes on this VM)

# Predictions besides the headline one (the profile calibrated before the run, as infersim uses it):
# tag -> (what the summary table says, the row keys' infix)
ALTERNATIVES = {
    "parametric": "Predicted from the same profile without the measured decode correction (the parametric cost "
                  "model alone; `calibration.decode_correction: false`):",
    "span": "Predicted from the profile whose probes span the run (calibrated before the first round and extended "
            "after every round, so calibration and measurement sample the same stretch of the machine's drift; "
            "measured decode correction on; the server case has no such profile):",
    "checked": "Predicted from the profile calibrated before the run, on a machine as fast as the machine checks "
               "around each repeat measured (every step × 1 + the mean median drift of the check before and "
               "after; a diagnostic, not a prediction a user has ahead of time: what remains is the miss the "
               "machine's measured drift does not explain):",
}


def fmt(x, spec=".4g"):
    return "-" if x is None else format(x, spec)


def _check_text(check: dict | None) -> str:
    if check is None:
        return "not checked"
    shapes = ", ".join(f"{p['id']} {p['drift'] * 100:+.1f} %" for p in check["points"])
    steal = "" if check.get("steal_share") is None else f"; steal {check['steal_share'] * 100:.1f} %"
    ok = ProfileCheck.from_dict(check).matches
    return (("as calibrated" if ok else "**drifted**") + f", median {check['median_drift'] * 100:+.1f} % "
            f"({shapes}{steal})")


def _worst_drift(rep: dict) -> float | None:
    """The larger |median drift| of a repeat's two machine checks (before, after)."""
    checks = [rep.get("check_before"), rep.get("check_after")]
    return None if not all(checks) else max(checks, key=lambda c: abs(c["median_drift"]))["median_drift"]


def check_cell(c: dict) -> str:
    """Summary cell: each repeat's machine drift from the calibration (the median shape of the check
    before or after it, whichever is further off)."""
    worst = [_worst_drift(r) for r in c.get("repeats", [c])]
    if any(w is None for w in worst):
        return "not checked"
    return " / ".join(f"{w * 100:+.0f} %" + ("" if abs(w) <= DRIFT_TOLERANCE else "*") for w in worst)


def check_lines(c: dict) -> list[str]:
    """Per-case text: every repeat's errors on the targeted metrics and the machine checks around it."""
    reps = c.get("repeats")
    if not reps:
        return []
    out = []
    for i, a in enumerate(reps, 1):
        errs = ", ".join(f"{r['metric']} {fmt(r['error_pct'], '+.1f')} %"
                         + "".join(f" ({tag} {r[f'error_{tag}_pct']:+.1f} %)" for tag in ALTERNATIVES
                                   if r.get(f"error_{tag}_pct") is not None)
                         for r in a["rows"] if r["metric"] in TARGETS)
        steal = "" if a.get("steal_share") is None else f"; steal {a['steal_share'] * 100:.1f} % of CPU time"
        if a.get("checked_speed") is not None:
            errs += f"; checked machine: steps × {a['checked_speed']:.3f}"
        out.append(f"- Repeat {i}: {errs}; load {a['load_before']:.1f}→{a['load_after']:.1f}{steal}; machine "
                   f"before: {_check_text(a.get('check_before'))}; after: {_check_text(a.get('check_after'))}")
    return ["Repeats (error of each; the table above has the median of the measured values):", ""] + out + [""]


def verdict(row, key: str = "error_pct") -> str:
    t = TARGETS.get(row["metric"])
    if t is None or row.get(key) is None:
        return ""
    return "ok" if abs(row[key]) <= t else "**miss**"


SUMMARY_METRICS = ("throughput", "TTFT p50", "TPOT p50", "e2e p50")


def summary_table(cases: list[dict], key: str, *, machine_columns: bool) -> list[str]:
    """One row per case: the error (`key` of each row) on the targeted metrics, with the verdicts,
    then how many figures are within target. Cases without `key` (the server case has no span
    prediction) are left out."""
    head = "| case | engine simulated | throughput | TTFT p50 | TPOT p50 | e2e p50 |"
    rule = "|---|---|---|---|---|---|"
    if machine_columns:
        head += " load before→after | machine drift, each repeat |"
        rule += "---|---|"
    lines = [head, rule]
    n_checked = n_miss = 0
    for c in cases:
        by = {r["metric"]: r for r in c["rows"]}
        if any(by[m].get(key) is None for m in SUMMARY_METRICS):
            continue
        cells = [f"{fmt(by[m][key], '+.1f')} % {verdict(by[m], key)}".strip() for m in SUMMARY_METRICS]
        n_checked += len(cells)
        n_miss += sum(verdict(by[m], key) == "**miss**" for m in SUMMARY_METRICS)
        lines.append(f"| {c['case']} | {c['scheduler']}, {c['max_num_seqs']} seq | " + " | ".join(cells) + " |"
                     + (f" {c['load_before']:.1f}→{c['load_after']:.1f} | {check_cell(c)} |" if machine_columns else ""))
    return lines + ["", f"{n_checked - n_miss} of {n_checked} targeted figures within target, {n_miss} missed.", ""]


def write_report(path: Path, cases: list[dict], meta: dict) -> None:
    span = meta.get("span_profile")
    lines = [
        "# Fidelity: infersim vs real llama.cpp on this machine",
        "",
        f"Generated by `benchmarks/fidelity.py` on {meta['date']} — every number below was measured by that run.",
        "",
        f"- Machine: {meta['machine']}",
        f"- Model: Gemma 3 270M Q4_K_M (`{meta['model']}`), llama-cpp-python {meta['llama_cpp']}, "
        f"{meta['threads']} llama.cpp thread(s)",
        f"- Hardware profile, local cases: `{meta['profile']}` ({meta['profile_source']})",
    ]
    if span:
        lines.append(f"- Hardware profile spanning the run, local cases: `{span}` (the same calibration, extended "
                     f"after every round of cases with `infersim calibrate --extend`: {meta.get('span_rounds')} rounds "
                     f"of probes pooled)")
    lines += [
    ]
    if meta.get("server_profile"):
        lines.append(f"- Hardware profile, server case: `{meta['server_profile']}` ({meta['server_profile_source']})")
    lines += [
        f"- Calibration quality (the profile against its own probes): local {meta['profile_quality']}"
        + (f"; spanning the run {meta['span_profile_quality']}" if span else "")
        + (f"; server {meta['server_profile_quality']}" if meta.get("server_profile") else ""),
        f"- Traces: prompts uniform 64–384 tokens, outputs 16–64 tokens (seeded); "
        f"{meta['requests']} requests per case; Poisson rate {fmt(meta['poisson_rate'], '.3g')} req/s "
        f"({meta.get('poisson_rule', '1.5 × the single-client request rate measured in case `local c=1`')})",
        f"- Load average (1 min) at start / end: {meta['load_start']:.2f} / {meta['load_end']:.2f} "
        f"on {meta['cpus']} CPUs (shared machine: the measured side is noisy when this exceeds the CPU count)",
        f"- Repeats: {meta.get('repeats', 1)} per case, in rounds (every local case once, then again; the server "
        f"case's repeats back to back); a measured figure is the median over the repeats",
        f"- Machine check right after calibration: {_check_text(meta.get('check_after_calibration'))}",
        f"- Command: `{meta['command']}`",
        "",
        "Targets: output throughput within ±5 %, TTFT p50, TPOT p50 and e2e p50 within ±10 %. "
        "Error = (predicted − measured) / measured.",
        "",
        "## Summary",
        "",
    ]
    tags = [t for t in ALTERNATIVES if any(r.get(f"error_{t}_pct") is not None for c in cases for r in c["rows"])]
    if tags:
        lines += ["Predicted from the profile calibrated before the run (what a user who calibrates once gets):", ""]
    lines += summary_table(cases, "error_pct", machine_columns=True)
    misses = [(c, r) for c in cases for r in c["rows"] if verdict(r) == "**miss**"]
    if misses and all(r.get("predicted_band") for _, r in misses):
        inside = [f"{c['case']} {r['metric']}" for c, r in misses
                  if r["predicted_band"][0] <= r["measured"] <= r["predicted_band"][1]]
        lines += [f"Of the {len(misses)} misses, {len(inside)} have the measured value inside the prediction's "
                  f"±{SPEED_MARGIN * 100:g} % speed band (what the same profile predicts for a machine {SPEED_MARGIN * 100:g} % faster or slower; "
                  f"`validate --speed-margin`)" + (f": {', '.join(inside)}." if inside else "."), ""]
    for tag in tags:
        lines += [ALTERNATIVES[tag], ""] + summary_table(cases, f"error_{tag}_pct", machine_columns=False)
    for c in cases:
        alt = [t for t in tags if all(r.get(f"predicted_{t}") is not None for r in c["rows"] if r["metric"] in TARGETS)]
        lines += [f"## {c['case']}", "",
                  f"{c['completed']}/{c['requests']} requests completed"
                  + (f" in each of {len(c['repeats'])} repeats" if len(c.get("repeats", [])) > 1 else "") + "; "
                  + (f"{c['concurrency']} closed-loop clients" if c["concurrency"] else "open loop (Poisson)")
                  + f"; simulated with scheduler `{c['scheduler']}`, max_num_seqs {c['max_num_seqs']}; "
                  f"wall {c['wall_s']:.1f} s.", ""]
        if c["failures"]:
            lines += ["Requests that did not complete: " + "; ".join(c["failures"][:5]), ""]
        banded = any(r.get("predicted_band") for r in c["rows"])
        head = "| metric | measured | each repeat | predicted | error % | target |" + (f" if ±{SPEED_MARGIN * 100:g} % speed |" if banded else "")
        rule = "|---|---|---|---|---|---|" + ("---|" if banded else "")
        for tag in alt:
            head += f" predicted, {tag} | error % | target |"
            rule += "---|---|---|"
        lines += [head, rule]
        for r in c["rows"]:
            tgt = f"±{r['target_pct']:g} % {verdict(r)}" if r["target_pct"] else ""
            each = " / ".join(fmt(x) for x in r.get("measured_repeats", [r["measured"]]))
            line = (f"| {r['metric']} ({r['unit']}) | {fmt(r['measured'])} | {each} | {fmt(r['predicted'])} | "
                    f"{fmt(r['error_pct'], '+.1f')} | {tgt} |")
            if banded:
                b = r.get("predicted_band")
                line += " - |" if not b else f" {fmt(b[0])}–{fmt(b[1])} |"
            for tag in alt:
                key = f"error_{tag}_pct"
                tgt_alt = f"±{r['target_pct']:g} % {verdict(r, key)}" if r["target_pct"] else ""
                line += f" {fmt(r.get(f'predicted_{tag}'))} | {fmt(r.get(key), '+.1f')} | {tgt_alt} |"
            lines.append(line)
        lines.append("")
        lines += check_lines(c)
    lines += ["## Reading the misses", "", meta["notes"], ""]
    path.write_text("\n".join(lines))


NOTES = """\
Where a figure misses, the per-case tables say in which direction. How to read them:
- A TPOT (decode step) error is the fitted decode cost against what the decode loop really took. The cost
  model prices a step as max(compute, memory) + per-iteration and per-sequence overheads, where a matmul
  over n >= 2 rows pays a GEMM start-up of n_1/2 rows (Hockney's half-performance length, fitted by the
  calibration) and a single row is a memory-bound GEMV: llama.cpp's CPU backend switches kernels there
  (`llamafile_sgemm` declines n < 2), which is why 2 sequences cost about 2.2x one; a decode token's
  attention (matrix-vector products over its own cache) is priced with its own fitted slowdown over a
  prompt's (sim/cost/roofline.py).
- TTFT at 1 client is the prefill cost; with several clients or a Poisson trace it also contains queueing
  (a request waits for a free slot or, under `sequential`, for every request ahead of it), so small
  per-step errors compound.
- Throughput and e2e follow from both; throughput within 5 % needs the decode cost right to 5 %.
- How the driver and the simulator agree on batches: the driver gives each sequence its own KV stream
  (`kv_unified = false`, as llama-server with an explicit `-np`). llama.cpp then only packs consecutive
  seq_ids into one pass (`llama_batch_allocr::split_equal`), so the driver lists decodes in seq_id order
  (in admission order, after slots were reused, a 4-sequence step took 93 ms instead of 64) and hands out
  the lowest free slot; still, decodes whose slots are not contiguous (slot 1 finished, 0 and 2 still
  running) take one pass per contiguous run, and an iteration that mixes a new prompt with running
  decodes takes a decode pass plus a prompt pass (with the prompt's first token in the decode pass
  when its slot follows theirs). `validate` simulates all of this with the engine setting
  `per_sequence_kv_streams` (same slot choice, the same passes: `sim/cost/llamacpp.py`).
- Open loop (Poisson) gives the driver every batch size from 1 to 8, and batches that are not a
  multiple of 4 pay llama.cpp's leftover-tile pass (a 7-sequence step costs more than an 8-sequence one;
  sim/cost/roofline.py `gemm_rows`). Before the cost model priced it, the Poisson TPOT p50 came out 15-16 % low
  while the closed-loop cases (mostly full batches of 1, 2, 4 or 8) were within target.
- Compare ITL p50 (the driver's typical gap between tokens) with the calibration's batched-decode probe
  points (one `llama_decode` of B sequences plus their sampling, timed alone): where the predicted ITL
  matches those probes but the measured ITL is higher, the miss is in what the driver adds around the raw
  step, not in the fitted decode cost.
- On a shared CPU other processes stretch measured steps: the measured side is slower when the load
  average is high. Calibration and measurement run minutes apart, so a load change between them shows
  up as a miss; rerun on a quiet machine before reading a miss as a model error.
- Machine checks: before and after every case the run re-times four probe shapes (1-, 4- and 8-sequence
  decode steps, a 256-token prompt; `calibrate.check`, also `infersim calibrate --check PROFILE`) and
  sets them against the calibration's own measurements of the same shapes. This is a virtual machine:
  a neighbour on the sibling hyperthread slows compute-bound steps (prompts, batched decode) and barely
  touches memory-bound ones (one-sequence decode), and neither the load average nor the process's CPU
  time shows it. Timed back to back, a 128-token prompt went from 243 ms to 300 ms within 40 s on an
  otherwise idle machine. The summary's last column gives each repeat's drift — the median shape of its
  check before or after, whichever is further off; * past ±8 %: there the measured side of that repeat
  ran on a slower (+) or faster (−) machine than the profile describes. The calibration runs its probe plan in two rounds for the same reason, and every
  case is measured several times in rounds, minutes apart, the report taking the median.
- Four predictions of the same measurements. The headline one uses the profile calibrated before the
  run, as a user who calibrates once would, with the measured decode correction that a llama.cpp-probe
  profile applies to the model and engine it measured (sim/cost/roofline.py `DecodeCorrection`: per decode batch
  size, the calibration's measured over fitted step time — the fitted kernel terms leave the same
  signed errors at the same batch sizes in every calibration of this model, 2-sequence steps 5-18 %
  faster than fitted, 3 and 4 sequences 4-19 % slower, 16 at short context 9-17 % faster). The second
  ("parametric") is the same profile without that correction: the cost model's formulas alone. The
  third ("span") uses the same calibration extended after every round of cases (`infersim calibrate
  --extend`: the probe plan run once more, its runs pooled with the stored ones, the cost model fitted
  again), so its probes were taken in between the measured cases, over the same half hour: a machine
  that was slower for a few minutes is then slower on both sides, and what remains is the cost model's
  own error. Headline minus span is what this machine's drift costs a calibrate-once user. The fourth
  ("checked") is the headline profile on a machine as fast as the checks around each repeat measured
  it: every step × (1 + their mean median drift), simulated exactly as a change of time unit (arrival
  times ÷ that factor, latencies × it). It needs measurements taken during the run, so it is a
  diagnostic, not a prediction: a miss that it removes was the machine's drift; one that remains is
  the cost model's or the checks' (four shapes timed once each, themselves a few % noisy). In open
  loop it also shows how sensitive a loaded queue is: near capacity a few % of speed moves the
  latencies by much more.
- The "if ±5 % speed" column is each prediction's range on a machine 5 % faster and 5 % slower (the
  same profile, `validate --speed-margin`; exact as a change of time unit). Closed loop it is the
  prediction ±5 %; open loop near capacity it is much wider, because the queue amplifies speed. A miss
  whose measured value lies inside it is one a 5 % drift of the machine could explain; the summary
  counts them.
- A prediction cannot be closer to the engine than the profile is to its own probe points: the
  calibration-quality line above gives that floor.
"""
