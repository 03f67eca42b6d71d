"""Is the low-load prompt step of many-expert MoE models priced too cheaply? The unloaded TTFT residual of
SGLang's curves against model properties, and what each candidate GPU mechanism would move (issue 38,
session 47; docs/cost-model.md 'MoE prompt steps: what the GPU prices'). A diagnostic: it reads the serving
corpus and the committed held-out predictions (benchmarks/serving_fidelity.json), prices single prompt steps
with the shipped presets, replays nothing and changes no prediction.

The question. Held out by source, the SGLang cookbook's TTFT p50 below the knee is under-predicted (median
signed -42%); at one client the misses look per model: well predicted ERNIE-4.5-21B (64 experts, top-6) and
Llama-4 Maverick / Scout (top-1) on MI300X, Llama-3.1-70B (dense); under-predicted DeepSeek-R1/V3.1 (256
experts), MiniMax-M2/M2.5 (256), Qwen3-Coder-480B (160), Qwen3-Coder-Next (512), Qwen3-235B (128), Step-3.5-
Flash (288), GLM-4.7-Flash (64, top-4). The candidates, each a GPU quantity that grows with the experts:

  (a) every expert's weights streamed at low tokens per expert. Priced already: a step of T tokens reads
      E (1 - (1 - k/E)^T) experts per layer (`expected_distinct_experts`), all 256 of DeepSeek's at T = 733.
      What is not priced is a re-read per row block: the fused-MoE kernel (SGLang's Triton `fused_moe_kernel`,
      one program per BLOCK_SIZE_M x BLOCK_SIZE_N tile of one expert's rows, sgl-project/sglang
      python/sglang/srt/layers/moe/fused_moe_triton/fused_moe.py) loads an expert's weight tile once per row
      block; the grouped pid order exists "to promote L2 data reuse" (the kernel's comment), so the second
      block's load normally hits L2. `reread_bytes_factor` is the upper bound with no L2 reuse at all:
      expert bytes x E[row blocks per touched expert].
  (b) tile-padding MACs (calibrate/serving/moe_tiles.py): each expert's rows rounded up to BLOCK_SIZE_M.
  (c) per-expert kernel launches in the eager prompt step. There are none: SGLang's MoE runs one grouped
      kernel for all experts per GEMM; the align-and-sort step is a fill and one kernel whatever E
      (fused_moe_triton/moe_align_block_size.py: `sorted_ids.fill_`, `sgl_moe_align_block_size`), and the
      padded count stays on the GPU (`num_tokens_post_padded` is read inside the kernel: no host sync). So
      the eager launch count (sim.cost.eager_launches, shipped at 38 us per launch) does not grow with E.

Under the shipped form a prompt step lasts max(GPU roofline, eager launch floor) (sim.cost.eager_prefill):
at a ~0.7k-token prompt the floor (30-83 ms) is above the priced GPU time (10-48 ms) on every MoE deployment
here, so (a) and (b) move the one-client prediction only by what they lift the GPU time above the floor.
`mechanism_moves` prices that directly; `GPU_FACTOR_NEEDED` (the `need_gpu_x` column) is the factor on the
priced GPU time a GPU mechanism would need to close each residual under the max form.

`sum_form_residual` is the residual if host launches and GPU work did not overlap (step = floor + GPU). No
mechanism for that is cited (the eager forward launches asynchronously; see (c)): it is shown because it is
the one form under which GPU time shows at one client.

Run: python -m calibrate.serving.moe_prompt_excess [CURVE_REGEX]   (default 'sglang-cookbook|ix-api-.*sglang')

Which candidate the data support was to be written down before any term was built; the answer is none, so no
priced term, ship rule or replay follows from this module.

Finding (written after the figures were seen; 2026-12-07, tree 3de222a, predictions from the committed
benchmarks/serving_fidelity.json of session 46, held out by source; `python -m calibrate.serving.moe_prompt_excess`):
per deployment at its short prompt (~0.7-0.9k tokens) and lowest load, measured - predicted TTFT p50:
  NVIDIA, cookbook (C = 1, medians): Qwen3-Coder-Next B200 TP2 +59 ms (+82%), MiniMax-M2.5 B200 TP8 +49 (+72%),
    DeepSeek-R1 B200 TP8 +31 (+30%), GLM-4.7-Flash B200 TP1 +30 (+47%), Step-3.5-Flash H200 TP4 +25 (+45%),
    Qwen3-235B B200 TP8 +23 (+30%), MiniMax-M2.5 H100 TP8 +13 (+19%);
  NVIDIA, SemiAnalysis (means): DeepSeek-R1 B300 FP8 TP8 / FP4 TP8 EP8 / FP4 TP4 EP4 at C = 1 -82 / -76 / -75 ms
    (-54 / -50 / -49%), DeepSeek-R1 H200 FP8 TP8 at C = 4 -5 ms (-3%);
  AMD, cookbook (C = 1, medians): MiniMax-M2 TP4 +318 ms, DeepSeek-V3.1 TP8 +82, Kimi-Linear TP4 +76,
    Qwen3-Coder-480B-FP8 TP8 +59, Llama-4-Scout +12, Llama-4-Maverick +1, ERNIE-4.5-21B -5.
Spearman rho of the residual [ms] (p): all 18 deployments, experts +0.22 (0.39), top-k +0.30 (0.23), tokens per
expert -0.36 (0.14), expert GB per GPU -0.19 (0.45), launches -0.19 (0.45); NVIDIA (11) no property with p < 0.05
(experts +0.20, launches -0.56 at p 0.07); AMD (7) experts +0.85 (0.01), top-k +0.78 (0.04), launches +0.81
(0.03), expert GB per GPU 0.00 (1.00).
  - Not a property of the model: the same architecture (DeepSeek-R1, 256 experts, top-8) is +31 ms on the
    cookbook's B200 (SGLang 0.5.6.post1) and -75..-82 ms on SemiAnalysis' B300 (0.5.12), both with the
    flashinfer_trtllm MoE runner SGLang selects for DeepSeek FP8 on sm100; MiniMax-M2.5 is +49 ms on B200
    (0.5.8) and +13 on H100 (0.5.9) with the same flags. The same prompts rerun at C = 1 (the cookbook's
    1000/1000 and 1000/8000 curves) differ by 15 ms (DeepSeek-R1 B200), 17 (Qwen3-235B), 74 (Qwen3-Coder-Next),
    57 (DeepSeek-V3.1 MI300X): the NVIDIA residuals are of the size of that repeat spread.
  - (a) and (b) cannot reach the rows: at these prompts the eager launch floor is above the priced GPU time on
    every MoE deployment, so with no L2 reuse at all (a's upper bound) the NVIDIA cookbook rows move 0 ms but
    Step-3.5-Flash (+21.5), and on AMD Qwen3-Coder-480B +22.7, MiniMax-M2 +9.1 and ERNIE +30.7 (the wrong way:
    ERNIE is -12%); tile padding (b) moves every row by 0.0 ms. Closing the NVIDIA cookbook residuals through
    GPU work would take 1.8-6.9x the priced GPU time; no GPU factor reaches SemiAnalysis' B300 rows, which sit
    below the launch floor itself (71-77 ms measured TTFT, 82.6 ms floor).
  - (c): the MoE path's launches do not grow with the experts (module docstring), and the residual does not
    rank with the launch count on NVIDIA (rho -0.56, the wrong sign).
  - On AMD the ranking by experts and top-k is the checkpoint and kernel path: the misses are the block-FP8
    checkpoints (DeepSeek-V3.1 and MiniMax-M2 on aiter's default path; Qwen3-Coder-480B-FP8, run with
    SGLANG_USE_AITER=0, misses by 59 ms against MiniMax-M2's 318 with the same 62 layers and top-8) and the
    linear-attention Kimi-Linear, the fits are bf16 Llama-4 (top-1) and ERNIE; expert bytes, what a weight
    mechanism would scale with, do not rank at all (rho 0.00). That is the AMD block-FP8 prefill already priced
    by its own rule (calibrate/serving/blockprefill.py), whose compute scale does not reach memory-bound
    0.7k-token steps; the cookbook's MI300X means carry 4,000+ ms warm-up outliers (p99 38 s on MiniMax-M2).
  - The form max(GPU, floor) against a sum (host launches not overlapping GPU work, no cited mechanism): the
    NVIDIA cookbook residuals would go +59/+49/+31/+30/+25/+23/+13 -> +39/+35/+8/+14/-8/0/-7 ms, but
    SemiAnalysis' B300 rows -75..-82 -> -93..-105 ms, Llama-4-Maverick +1 -> -29 and ERNIE -5 -> -18: the
    cross-source gap stays.
So the low-load miss of this block is per deployment (source, release, host), not a GPU cost of many experts.
Held out by source the cookbook's fold fits SGLang 0.5's front end on the other 0.5 source, SemiAnalysis, whose
B300 rows already sit below the launch floor: 20 ms (the json's `heldout_by_source.chosen`), against 70 ms in
SemiAnalysis' fold and 75 ms on all sources; the cookbook's NVIDIA residuals (+13..+59 ms) are about that
difference. What is left open: why the B300 rows run below 2,174 x 38 us (a faster host or fewer launches on
0.5.12 with trtllm_mla and flashinfer_trtllm: not counted here), and the long-prompt per-token misses (SemiAnalysis
B300 DeepSeek-R1 FP8 TP4 at 7.4k tokens: 381 ms measured, 218 predicted), which are prefill compute, not this block."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from calibrate.serving.moe_tiles import B200_DEEPSEEK_FP8_BLOCK_M, expected_padded_rows, fused_moe_block_m

FIDELITY = Path(__file__).resolve().parents[2] / "benchmarks" / "serving_fidelity.json"
DEFAULT_PATTERN = r"sglang-cookbook|ix-api-.*sglang"
#: model properties the residual is ranked against (keys of `unloaded_rows`' entries)
PROPERTIES = ("n_experts", "top_k", "tokens_per_expert", "n_layers", "launches", "expert_gb_per_gpu", "tp",
              "gpu_ms", "floor_ms")
AMD_DEVICES = ("mi300x", "mi325x", "mi355x")


def reread_bytes_factor(tokens: int, n_experts: int, n_active: int, block_m: int, pool_fraction: float = 1.0) -> float:
    """Expert bytes a step streams with no L2 reuse across an expert's row blocks, over the bytes priced (each
    touched expert once): E[sum_e ceil(m_e / B)] / E[experts with m_e > 0], m_e ~ Binomial(T, k / E_c)
    (`calibrate.serving.moe_tiles.expected_padded_rows` / B over the touched experts). >= 1; 1 for B >= T."""
    from sim.cost.kernels import expected_distinct_experts

    t = int(tokens)
    if t <= 0 or n_experts <= 0:
        return 1.0
    blocks = expected_padded_rows(t, n_experts, n_active, block_m, pool_fraction) / block_m
    touched = float(expected_distinct_experts(n_experts, n_active, t, pool_fraction))
    return max(blocks / touched, 1.0) if touched > 0 else 1.0


def max_form_move(gpu_ms: float, gpu_new_ms: float, floor_ms: float) -> float:
    """What a step priced max(GPU, floor) moves by when its GPU time goes gpu_ms -> gpu_new_ms [ms]."""
    return max(gpu_new_ms, floor_ms) - max(gpu_ms, floor_ms)


def gpu_factor_needed(residual_ms: float, gpu_ms: float, floor_ms: float) -> float:
    """The factor on the priced GPU time that closes `residual_ms` under the max form: the step must become
    max(gpu, floor) + residual, reached by the GPU alone (inf with no GPU time)."""
    return (max(gpu_ms, floor_ms) + residual_ms) / gpu_ms if gpu_ms > 0 else float("inf")


def deployment(curve_id: str) -> str:
    """A curve id without its trailing -<input>-<output> lengths (the cookbook's deployments)."""
    return re.sub(r"-\d+-\d+$", "", curve_id)


def per_deployment(rows: list[dict], max_prompt: int = 1000) -> list[dict]:
    """One entry per deployment (MoE only) at its short prompt: its curves' rows with a median prompt of at most
    `max_prompt` tokens, residual = median over them of measured - predicted [ms], rel = median of
    measured / predicted - 1; the other fields from the first row."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        if r["n_experts"] and r["prompt"] <= max_prompt:
            groups[deployment(r["curve_id"])].append(r)
    out = []
    for dep, rs in sorted(groups.items()):
        e = dict(rs[0])
        e["deployment"] = dep
        e["residual_ms"] = float(np.median([x["measured"] - x["predicted"] for x in rs]))
        e["rel"] = float(np.median([x["measured"] / x["predicted"] - 1.0 for x in rs]))
        e["n_curves"] = len(rs)
        out.append(e)
    return out


def rank_correlations(entries: list[dict], props=PROPERTIES) -> dict[str, tuple[float, float]]:
    """Spearman rho and its p-value of each property against the residual [ms] (scipy.stats.spearmanr);
    NaN where a property does not vary."""
    from scipy.stats import spearmanr

    y = [e["residual_ms"] for e in entries]
    out = {}
    for f in props:
        x = [e[f] for e in entries]
        if len(set(x)) < 2 or len(entries) < 3:
            out[f] = (float("nan"), float("nan"))
            continue
        rho, p = spearmanr(x, y)
        out[f] = (float(rho), float(p))
    return out


def _lowest_ttft_rows(fidelity: dict, pattern: str) -> dict[str, dict]:
    """Per curve matching `pattern`: its lowest-load held-out TTFT p50 row, the median statistic where the
    source printed one (means carry warm-up outliers: 4,000+ ms on cookbook MI300X curves), else the mean."""
    best: dict[str, dict] = {}
    for r in fidelity["rows"]:
        if r.get("metric") != "ttft_p50" or not re.search(pattern, r["curve_id"]) or r.get("by_source") is None:
            continue
        stat = 0 if r["row_id"].endswith("-median") else 1
        key = (r["load"], stat)
        cur = best.get(r["curve_id"])
        if cur is None or key < cur[0]:
            best[r["curve_id"]] = (key, r)
    return {cid: r for cid, (_, r) in best.items()}


def unloaded_rows(pattern: str = DEFAULT_PATTERN, fidelity_path: Path | str = FIDELITY) -> list[dict]:
    """Each matching curve's lowest-load TTFT p50 row with the model's properties and the preset's prompt step
    priced (GPU roofline, eager launch floor, (a) and (b) applied)."""
    import copy

    from calibrate.serving.prefill_slope import padded_step_ms
    from calibrate.serving.replay import point_deployment
    from calibrate.serving.rows import load_corpus, load_points
    from sim.bench.serve import deployment_parts
    from sim.catalog import cache
    from sim.cost.eager_launches import forward_launches
    from sim.cost.eager_prefill import eager_prefill_floor_s

    fid = json.loads(Path(fidelity_path).read_text(encoding="utf-8"))
    chosen = _lowest_ttft_rows(fid, pattern)
    curves: dict[str, list[dict]] = defaultdict(list)
    for r in load_corpus():
        if r["curve_id"] in chosen:
            curves[r["curve_id"]].append(r)
    out = []
    for cid in sorted(curves):
        row = chosen[cid]
        pts = [p for p in load_points(curves[cid]) if row["row_id"] in p.row_ids.values()]
        if not pts:
            continue
        p = pts[0]
        # the deployment as the replay builds it (no fit parameters): the engine resolved for the device and the
        # cost model; `m` the catalog's model, as before (parts.model is the copy the engine loads: its file sizes
        # dropped outside llama.cpp, sim.catalog.models.ModelSpec.as_loaded_by)
        _, eng, parts = deployment_parts(point_deployment(p))
        cost = parts.cost
        m = cache.model(p.model)
        tokens = int(round(float(np.median(p.prompt_lens))))
        gpu_ms = 1e3 * cost.step_time([tokens], [0], [])
        floor_ms = 1e3 * eager_prefill_floor_s(m, eng, cost.quant)
        e, k = (m.n_experts, m.n_experts_active) if m.is_moe else (0, 0)
        gpu_a = gpu_b = gpu_ms
        if m.is_moe:
            block = fused_moe_block_m(tokens, B200_DEEPSEEK_FP8_BLOCK_M)
            reread = copy.copy(cost)
            reread.expert_bytes = cost.expert_bytes * reread_bytes_factor(tokens, e, k, block, m.expert_pool_fraction)
            gpu_a = 1e3 * reread.step_time([tokens], [0], [])
            gpu_b = padded_step_ms(cost, tokens)
        out.append({
            "curve_id": cid, "source": p.source, "device": p.device, "engine": p.engine, "tp": p.tp,
            "load": row["load"], "statistic": row["row_id"].rsplit("-", 1)[-1], "prompt": tokens,
            "measured": row["measured"], "predicted": row["by_source"], "baseline": row["baseline"],
            "n_experts": e, "top_k": k, "tokens_per_expert": tokens * k / e if e else 0.0,
            "n_layers": m.n_layers, "launches": forward_launches(m, cost.quant, p.tp),
            "expert_gb_per_gpu": cost.expert_bytes * e / max(p.tp, 1) / 1e9 if e else 0.0,
            "gpu_ms": gpu_ms, "floor_ms": floor_ms, "gpu_reread_ms": gpu_a, "gpu_padded_ms": gpu_b,
            "amd": any(a in p.device for a in AMD_DEVICES)})
    return out


def _f(x, fmt="{:.0f}"):
    return "-" if x is None or (isinstance(x, float) and np.isnan(x)) else fmt.format(x)


def markdown(rows: list[dict]) -> list[str]:
    """The per-deployment table, the rank correlations (all, NVIDIA, AMD) and the per-curve rows."""
    deps = per_deployment(rows)
    for d in deps:
        d["need_gpu_x"] = gpu_factor_needed(d["residual_ms"], d["gpu_ms"], d["floor_ms"])
        d["move_a"] = max_form_move(d["gpu_ms"], d["gpu_reread_ms"], d["floor_ms"])
        d["move_b"] = max_form_move(d["gpu_ms"], d["gpu_padded_ms"], d["floor_ms"])
        d["sum_form_residual"] = d["residual_ms"] - min(d["gpu_ms"], d["floor_ms"])
    deps.sort(key=lambda d: (d["amd"], -d["residual_ms"]))
    L = ["| deployment (short prompt, lowest load) | E | k | T k / E | launches | expert GB / GPU | GPU [ms] "
         "| launch floor [ms] | meas - pred [ms] | rel | GPU x needed | (a) moves [ms] | (b) moves [ms] "
         "| residual if summed [ms] |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for d in deps:
        L.append(f"| {d['deployment']} (C={d['load']:g}, {d['statistic']}) | {d['n_experts']} | {d['top_k']} "
                 f"| {d['tokens_per_expert']:.1f} | {d['launches']} | {d['expert_gb_per_gpu']:.1f} | {d['gpu_ms']:.1f} "
                 f"| {d['floor_ms']:.1f} | {d['residual_ms']:+.0f} | {100 * d['rel']:+.0f}% | {d['need_gpu_x']:.1f} "
                 f"| {d['move_a']:+.1f} | {d['move_b']:+.1f} | {d['sum_form_residual']:+.0f} |")
    for name, sel in (("all", deps), ("NVIDIA", [d for d in deps if not d["amd"]]),
                      ("AMD", [d for d in deps if d["amd"]])):
        rc = rank_correlations(sel)
        L.append("")
        L.append(f"Spearman rho (p) of the residual [ms] against each property, {name} ({len(sel)} deployments): "
                 + ", ".join(f"{f} {_f(r, '{:+.2f}')} ({_f(p, '{:.2f}')})" for f, (r, p) in rc.items()))
    L += ["", "| curve | C | stat | prompt | measured | predicted held out | GPU [ms] | floor [ms] |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        L.append(f"| {r['curve_id']} | {r['load']:g} | {r['statistic']} | {r['prompt']} | {r['measured']:.0f} "
                 f"| {r['predicted']:.0f} | {r['gpu_ms']:.1f} | {r['floor_ms']:.1f} |")
    return L


def main(pattern: str = DEFAULT_PATTERN) -> list[str]:
    return markdown(unloaded_rows(pattern))


if __name__ == "__main__":  # pragma: no cover - a report printer
    import sys

    print("\n".join(main(*sys.argv[1:2])))
