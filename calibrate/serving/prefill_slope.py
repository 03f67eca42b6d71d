"""What a prompt (extend) step costs, measured against priced, split into a fixed part and a per-token part
(issue 38, session 45; docs/cost-model.md 'MoE prompt steps: what the GPU prices'). A diagnostic: it reads
the serving corpus and prices single prompt steps with the shipped cost model; it replays nothing and
changes no prediction.

Two measured views of a deployment's prompt step, from a pair of curves that differ only in the prompt
length (the SGLang cookbook's 1000/1000 and 8000/1000 random-dataset runs: ~0.5k and ~4k prompt tokens):

  one client:   TTFT median at C = 1 on each curve. Their difference over the difference of the median
                prompts is the prompt step's cost per token [us/token]; the front end and the step's fixed
                part cancel.
  under load:   at the highest load C of each curve, the prompt steps run between decode steps (SGLang runs
                extend batches apart from decodes), so a request's mean ITL holds (C - 1) other requests'
                prompt steps spread over its N output tokens (calibrate/serving/decode_split.py):
                    per-prompt stall [ms] = (ITL mean - ITL median) x N / (C - 1)
                (an estimate: extend batches holding several prompts, and tokens of the request's own
                lifetime that see more or fewer arrivals, are not separated). Two prompt lengths give a
                fixed part (the intercept at 0 tokens) and a per-token part (the slope).

Priced: `CostModel.step_time([P], [0], [])` at the same two median prompts (one prompt, empty cache, the
deployment's preset), its intercept and slope. A fixed part measured far above priced is host time (the eager
launch floor, sim.cost.eager_prefill); a per-token part measured above priced is GPU work the roofline misses."""

from __future__ import annotations

import re
from collections import defaultdict
from types import SimpleNamespace

import numpy as np

from calibrate.serving.moe_tiles import B200_DEEPSEEK_FP8_BLOCK_M, fused_moe_block_m, padding_factor

#: a curve id's trailing "-<input>-<output>" lengths, stripped to name the deployment
_LENGTHS = re.compile(r"-(\d+)-(\d+)$")


def deployment_of(curve_id: str) -> tuple[str, int] | None:
    """(deployment, nominal input length) of a curve id ending in -<input>-<output>; None otherwise."""
    m = _LENGTHS.search(curve_id)
    return (curve_id[:m.start()], int(m.group(1))) if m else None


def _line(x0: float, y0: float, x1: float, y1: float) -> tuple[float, float]:
    """(intercept, slope) of the line through two points; the slope per unit of x."""
    slope = (y1 - y0) / (x1 - x0)
    return y0 - slope * x0, slope


def one_client_slope_us(short, long) -> float | None:
    """Measured prompt cost per token [us] from the C = 1 TTFT medians of two curves' points (LoadPoint-like:
    .load, .prompt_lens, .measured[("ttft_ms", "median")]); None without both figures."""
    ts, tl = short.measured.get(("ttft_ms", "median")), long.measured.get(("ttft_ms", "median"))
    ps, pl = float(np.median(short.prompt_lens)), float(np.median(long.prompt_lens))
    if ts is None or tl is None or pl <= ps:
        return None
    return 1e3 * (tl - ts) / (pl - ps)


def stall_per_prompt_ms(point) -> float | None:
    """(ITL mean - ITL median) x mean output tokens / (C - 1) of a concurrency point with C > 1 (module
    docstring); None without both ITL figures."""
    mean, med = point.measured.get(("itl_ms", "mean")), point.measured.get(("itl_ms", "median"))
    if mean is None or med is None or not point.load > 1:
        return None
    return (mean - med) * float(np.mean(point.output_lens)) / (point.load - 1.0)


def prompt_step_rows(points, price_ms, price_padded_ms=None, predicted_itl=None) -> list[dict]:
    """Per deployment with a short- and a long-prompt curve (the two smallest nominal input lengths whose
    output lengths match): measured vs priced prompt-step cost. `points`: LoadPoint-likes (.curve_id, .load,
    .prompt_lens, .output_lens, .measured); `price_ms(point, prompt_tokens)` -> priced one-prompt step [ms].
    Each row: deployment, prompts (short, long medians), c1_slope_meas_us, c1_noise_us (the repeat spread of the
    short prompts' C = 1 TTFT median where another curve ran them, over the prompt difference; else None), stall_ms (short, long) at each curve's
    highest load, load_intercept_ms / load_slope_us (measured, under load), priced_ms (short, long),
    priced_intercept_ms / priced_slope_us."""
    curves: dict[tuple[str, str], dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for p in points:
        d = deployment_of(p.curve_id)
        if d is not None and p.load_kind == "concurrency":
            out_len = _LENGTHS.search(p.curve_id).group(2)
            curves[(d[0], out_len)][d[1]].append(p)
    rows = []
    for (dep, out), by_len in sorted(curves.items()):
        if len(by_len) < 2:
            continue
        s_len, l_len = sorted(by_len)[:2]
        s_pts, l_pts = sorted(by_len[s_len], key=lambda p: p.load), sorted(by_len[l_len], key=lambda p: p.load)
        ps, pl = float(np.median(s_pts[0].prompt_lens)), float(np.median(l_pts[0].prompt_lens))
        c1 = (one_client_slope_us(s_pts[0], l_pts[0])
              if s_pts[0].load == 1 and l_pts[0].load == 1 else None)
        # the same prompts run again with another output length (the cookbook's 1000/8000): the C = 1 TTFT
        # median's repeat spread, over the prompt difference, is the one-client slope's noise [us/token]
        noise = [abs(q.measured[("ttft_ms", "median")] - s_pts[0].measured[("ttft_ms", "median")])
                 for (d2, o2), b2 in curves.items() if d2 == dep and o2 != out
                 for q in b2.get(s_len, [])[:1]
                 if q.load == 1 == s_pts[0].load and ("ttft_ms", "median") in q.measured
                 and ("ttft_ms", "median") in s_pts[0].measured]
        st_s, st_l = stall_per_prompt_ms(s_pts[-1]), stall_per_prompt_ms(l_pts[-1])
        ms_s, ms_l = float(np.median(s_pts[-1].prompt_lens)), float(np.median(l_pts[-1].prompt_lens))
        load_line = _line(ms_s, st_s, ms_l, st_l) if st_s is not None and st_l is not None and ms_l > ms_s else None
        pred = [None, None]
        if predicted_itl is not None:
            for i, q in enumerate((s_pts[-1], l_pts[-1])):
                mean, med = predicted_itl(q)
                pred[i] = stall_per_prompt_ms(SimpleNamespace(load=q.load, output_lens=q.output_lens, measured={
                    ("itl_ms", "mean"): mean, ("itl_ms", "median"): med}))
        pred_line = (_line(ms_s, pred[0], ms_l, pred[1]) if None not in pred and ms_l > ms_s else None)
        pr_s, pr_l = price_ms(s_pts[0], ps), price_ms(s_pts[0], pl)
        pi, psl = _line(ps, pr_s, pl, pr_l)
        rows.append({"deployment": dep, "prompts": (ps, pl), "c1_slope_meas_us": c1,
                     "c1_noise_us": 1e3 * max(noise) / (pl - ps) if noise else None, "stall_ms": (st_s, st_l),
                     "load_intercept_ms": load_line[0] if load_line else None,
                     "load_slope_us": 1e3 * load_line[1] if load_line else None,
                     "priced_ms": (pr_s, pr_l), "priced_intercept_ms": pi, "priced_slope_us": 1e3 * psl,
                     "pred_stall_ms": tuple(pred), "pred_load_intercept_ms": pred_line[0] if pred_line else None,
                     "pred_load_slope_us": 1e3 * pred_line[1] if pred_line else None,
                     "padded_ms": ((price_padded_ms(s_pts[0], ps), price_padded_ms(s_pts[0], pl))
                                   if price_padded_ms is not None else None)})
    return rows


def _f(x, fmt: str = "{:.0f}") -> str:
    return "-" if x is None else fmt.format(x)


def prompt_step_markdown(rows: list[dict]) -> list[str]:
    """The table of `prompt_step_rows` (markdown lines)."""
    L = ["| deployment | prompts (median) | per token, 1 client meas | under load: stall per prompt meas / pred [ms] "
         "| under load: fixed [ms] / per token [us] meas | the same, pred | priced step [ms] "
         "| priced fixed [ms] / per token [us] | priced with tile padding [ms] |",
         "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        L.append(f"| {r['deployment']} | {r['prompts'][0]:.0f} / {r['prompts'][1]:.0f} "
                 f"| {_f(r['c1_slope_meas_us'], '{:.1f}')} us"
                 + (f" (+/- {r['c1_noise_us']:.1f})" if r.get("c1_noise_us") is not None else "") + " "
                 f"| {_f(r['stall_ms'][0])} / {_f(r['pred_stall_ms'][0])}, {_f(r['stall_ms'][1])} / {_f(r['pred_stall_ms'][1])} "
                 f"| {_f(r['load_intercept_ms'])} / {_f(r['load_slope_us'], '{:.1f}')} "
                 f"| {_f(r['pred_load_intercept_ms'])} / {_f(r['pred_load_slope_us'], '{:.1f}')} "
                 f"| {r['priced_ms'][0]:.1f} / {r['priced_ms'][1]:.1f} "
                 f"| {r['priced_intercept_ms']:.1f} / {r['priced_slope_us']:.1f} "
                 f"| {_f(r['padded_ms'] and r['padded_ms'][0], '{:.1f}')} / {_f(r['padded_ms'] and r['padded_ms'][1], '{:.1f}')} |")
    return L


def _cost_of(point):
    """The point's cost model as the serving replay builds it: the replay's deployment of the point
    (calibrate.serving.replay.point_deployment, no fit parameters) through the builder serve_replica uses
    (sim.bench.serve.deployment_parts)."""
    from calibrate.serving.replay import point_deployment
    from sim.bench.serve import deployment_parts

    return deployment_parts(point_deployment(point))[2].cost


def _price_with_preset(point, prompt_tokens: float) -> float:
    """One prompt of `prompt_tokens` tokens on an empty cache, priced by the point's deployment [ms]."""
    return 1e3 * _cost_of(point).step_time([int(round(prompt_tokens))], [0], [])


def padded_step_ms(cost, prompt_tokens: int, table: dict[int, int] = B200_DEEPSEEK_FP8_BLOCK_M) -> float:
    """`cost.step_time` of one prompt of `prompt_tokens` tokens with the routed experts' FLOPs per token scaled by
    the fused-MoE padding factor at that step (calibrate.serving.moe_tiles: BLOCK_SIZE_M from `table` by the
    step's tokens) [ms]; the plain step for a dense model. Priced on a copy: `cost` is left as it was."""
    import copy

    m = cost.model
    if not m.is_moe:
        return 1e3 * cost.step_time([prompt_tokens], [0], [])
    factor = padding_factor(prompt_tokens, m.n_experts, m.n_experts_active, fused_moe_block_m(prompt_tokens, table),
                            m.expert_pool_fraction)
    padded = copy.copy(cost)
    # both forms `_layer_matmul_flops` uses: the per-token total and the per-expert-row FLOPs (non-expert unchanged)
    padded.expert_flops_per_row = factor * cost.expert_flops_per_row
    padded.flops_per_token = cost.flops_per_token + (factor - 1.0) * m.n_experts_active * cost.expert_flops_per_row
    return 1e3 * padded.step_time([prompt_tokens], [0], [])


def _price_padded(point, prompt_tokens: float) -> float:
    return padded_step_ms(_cost_of(point), int(round(prompt_tokens)))


def _replayed_itl(point) -> tuple[float, float]:
    """(ITL mean, ITL median) [ms] of the point replayed with the shipped presets (calibrate.serving.replay)."""
    from calibrate.serving.replay import replay

    out = replay(point)
    return out["itl_ms|mean"], out["itl_ms|median"]


def main(pattern: str = "sglang-cookbook") -> list[str]:
    """The table for the corpus curves whose id matches `pattern` (python -m calibrate.serving.prefill_slope)."""
    from calibrate.serving.rows import load_corpus, load_points

    curves: dict[str, list[dict]] = defaultdict(list)
    for r in load_corpus():
        if re.search(pattern, r["curve_id"]):
            curves[r["curve_id"]].append(r)
    points = [p for cid in sorted(curves) for p in load_points(curves[cid])]
    return prompt_step_markdown(prompt_step_rows(points, _price_with_preset, _price_padded, _replayed_itl))


if __name__ == "__main__":  # pragma: no cover - a report printer
    import sys

    print("\n".join(main(*sys.argv[1:2])))
