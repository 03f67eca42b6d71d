"""Fitting: one (device, kernel family) to its rows (`fit_group`), every group (`fit_all`), and the
kernel and model properties chosen across devices (`fit_matvec_alu`, `fit_routing`).
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from calibrate.public.era import current_share
from calibrate.public.params import (
    BOUNDS,
    PRIOR_ATTENTION,
    PRIOR_BANDWIDTH,
    PRIOR_COMPUTE,
    PRIOR_FLOOR_MS,
    PRIOR_HALF_ROWS,
    PRIOR_LATENCY_US_SIGMA,
    PRIOR_SEQ_MS,
    ROBUST_SCALE,
    ROW_SIGMA,
    GroupParams,
    robust_loss,
)
from calibrate.public.corpus import PublicCorpus, corpus_or_default
from calibrate.public.replay import SYNTHETIC_SUFFIX, _row_objects, predict, routing_key
from calibrate.public.replayers import Prepared
from calibrate.public_corpus import REPO_SOURCE
from sim.catalog.engine_config import base_family
from sim.catalog.quant import kernel_class


def _rows_loss(items, p: GroupParams, corpus: PublicCorpus) -> float:
    """`robust_loss` of rows [Prepared] predicted with a group's parameters."""
    return robust_loss([math.log(max(predict(it.row, it.shape, p, corpus=corpus), 1e-12) / it.row.value) / ROW_SIGMA
                        for it in items])


def _grid_choice(grid, apply, groups: dict, rows_of: dict, corpus: PublicCorpus) -> tuple[float, dict]:
    """A kernel or model property chosen on all rows: for each value of `grid`, `apply(value)`, refit
    every group of `rows_of` ({group key: the rows scored}) and sum the robust loss of those rows; the
    value with the least loss is applied again and returned with {value: loss}. `apply` sets the
    property on `corpus`, which the refits and the scoring price with."""
    scores = {}
    for c in grid:
        apply(c)
        loss = 0.0
        for k, rows in rows_of.items():
            loss += _rows_loss(rows, fit_group(groups[k], *k, corpus), corpus)
        scores[c] = loss
    best = min(scores, key=scores.get)
    apply(best)
    return best, scores


# Fisher information the rows must carry on a log-efficiency for it to count as pinned: 16 = the rows
# alone fix it to +-25% (one standard deviation; ROW_SIGMA is the rows' unit). Of three tried, held
# out by device (median / p90, single-stream decode): 1 -> 10.5 / 43.4%, 8.1%; 16 -> 10.2 / 40.2%,
# 8.1%; 100 -> 11.1 / 43.2%, 9.0%.
PIN_INFO = 16.0


def _classes(items: list[Prepared], corpus: PublicCorpus) -> tuple[str, ...]:
    seen = []
    for it in items:
        _, _, spec, q, _ = _row_objects(it.row, corpus=corpus)
        c = kernel_class(q, base_family(it.family), spec.is_moe)[0]
        if c not in seen:
            seen.append(c)
    return tuple(seen)


def _unpack(x: np.ndarray, classes: tuple[str, ...], device: str, family: str,
            kquant_matvec_flops: float | None = None) -> GroupParams:
    """x = [log attention, floor ms, seq ms, half rows, log bandwidth per class..., log compute per class...]."""
    n = len(classes)
    att, floor, seq, half = float(np.exp(x[0])), float(max(x[1], 0.0)), float(max(x[2], 0.0)), float(max(x[3], 0.0))
    bw = {c: float(np.exp(v)) for c, v in zip(classes, x[4:4 + n])}
    comp = {c: float(np.exp(v)) for c, v in zip(classes, x[4 + n:4 + 2 * n])}
    lat = float(max(x[4 + 2 * n], 0.0)) if len(x) > 4 + 2 * n else None
    return GroupParams(device, family, bw, comp, att, floor, seq, half, lat, kquant_matvec_flops=kquant_matvec_flops)


def fit_group(items: list[Prepared], device: str, family: str, corpus: PublicCorpus | None = None) -> GroupParams:
    """Least squares on log(predicted / measured) of the group's rows, with priors at generic values
    (PRIOR_*) that hold what the rows do not measure; the rows priced with `corpus`'s fitted routing
    skew and K-quant mat-vec cost."""
    from scipy.optimize import least_squares

    corpus = corpus_or_default(corpus)
    kquant = corpus.matvec_flops_for(device, family)
    items = [it for it in items if it.shape is not None]
    classes = _classes(items, corpus)
    n = len(classes)
    centre = np.array([math.log(PRIOR_ATTENTION[0]), PRIOR_FLOOR_MS[0], PRIOR_SEQ_MS[0], PRIOR_HALF_ROWS[0]]
                      + [math.log(PRIOR_BANDWIDTH[0])] * n + [math.log(PRIOR_COMPUTE[0])] * n)
    sigma = np.array([PRIOR_ATTENTION[1], PRIOR_FLOOR_MS[1], PRIOR_SEQ_MS[1], PRIOR_HALF_ROWS[1]] + [PRIOR_BANDWIDTH[1]] * n + [PRIOR_COMPUTE[1]] * n)
    lo = np.array([math.log(BOUNDS["attention"][0]), BOUNDS["floor_ms"][0], BOUNDS["seq_ms"][0], BOUNDS["half_rows"][0]]
                  + [math.log(BOUNDS["bandwidth"][0])] * n + [math.log(BOUNDS["compute"][0])] * n)
    hi = np.array([0.0, BOUNDS["floor_ms"][1], BOUNDS["seq_ms"][1], BOUNDS["half_rows"][1]] + [0.0] * (2 * n))
    if any(it.row.n_devices > 1 for it in items):
        # rows over several devices also measure the all-reduce's step latency (normal prior at the
        # profile's interconnect_latency_us, 5 us wide)
        from sim.catalog.hardware import load_profile

        lat0 = load_profile(device).interconnect_latency_us
        centre, sigma = np.append(centre, lat0), np.append(sigma, PRIOR_LATENCY_US_SIGMA)
        lo, hi = np.append(lo, BOUNDS["lat_us"][0]), np.append(hi, BOUNDS["lat_us"][1])
    # a (source, quantity) block of n rows weighs as much as n^0.75 rows, so one 100-row table does
    # not drown a 4-row one
    blocks: dict = defaultdict(int)
    for it in items:
        blocks[(it.row.source, it.row.quantity)] += 1
    w = np.array([blocks[(it.row.source, it.row.quantity)] ** -0.125 for it in items])
    meas = np.array([it.row.value for it in items])

    def resid(x):
        p = _unpack(x, classes, device, family, kquant)
        # the group's own fit prices its rows without the MMQ tile floor (`row_mmq_tiles`)
        pred = np.array([predict(it.row, it.shape, p, fitting=True, corpus=corpus) for it in items])
        pred = np.where(np.isfinite(pred) & (pred > 0), pred, meas * 1e3)
        return np.concatenate([w * np.log(pred / meas) / ROW_SIGMA, (x - centre) / sigma])


    # The roofline's max(compute, memory) is flat in the parameter that does not bind: a prompt the
    # prior's compute rate makes memory-bound gives the compute efficiency no gradient, however slow the
    # measured prompt was. So the descent starts from the best of a few points that differ in the
    # compute efficiencies (x 1, 1/4, 1/16 of the prior) and bandwidths (x 1, 1/2).
    starts = []
    for dc in (0.0, -math.log(4), -math.log(16)):
        for db in (0.0, -math.log(2)):
            x = centre.copy()
            x[4:4 + n] += db
            x[4 + n:4 + 2 * n] += dc
            starts.append(np.clip(x, lo + 1e-9, hi - 1e-9))

    def cost(x):
        return robust_loss(resid(x))

    x0 = min(starts, key=cost)
    sol = least_squares(resid, x0, bounds=(lo, hi), x_scale=1.0, method="trf", loss="soft_l1", f_scale=ROBUST_SCALE,
                        max_nfev=400, ftol=1e-10, xtol=1e-10, gtol=1e-10)
    p = _unpack(sol.x, classes, device, family, kquant)
    # which efficiencies the rows pinned: the rows' Fisher information on each log-efficiency (the sum
    # of squared Jacobian entries of the row residuals, whose unit is ROW_SIGMA) at least PIN_INFO
    info = np.sum(sol.jac[:len(items)] ** 2, axis=0)
    # x's layout (`_unpack`): log attention, floor, per-sequence cost, half rows, log bandwidths, log
    # compute efficiencies[, all-reduce latency]; the log-efficiencies and the start-up are named
    names = ["attention", "", "", "half_rows"] + [f"bandwidth:{c}" for c in classes] + [f"compute:{c}" for c in classes]
    # a value at its bound was set by the bound, not the rows (the M4 Max's MLX bandwidth, 1.0: rows
    # faster than its datasheet allows with the model's per-step costs): not pinned either
    at_bound = np.isclose(sol.x, lo, atol=1e-6) | np.isclose(sol.x, hi, atol=1e-6)
    # The GEMM start-up (half_rows, Hockney's n_1/2 in rows, not a log) counts as pinned when the rows
    # tell more than its prior (a standard deviation under PRIOR_HALF_ROWS' 128 rows) and it is off its
    # bound of 0. Without this a device whose rows never ran small matmuls (the RTX 4090's and M1 Max's
    # llama.cpp rows: dense pp512 and tg128, fitted n_1/2 = 0 at the bound) lent a start-up of 0 as if
    # measured; `transfer` now counts such a donor UNPINNED_TIERS tiers further, as an unpinned
    # efficiency. Held out by device on the 1,234 rows (median / p90, rows past 25%): without 8.9 / 31.5%,
    # 189; this rule 8.9 / 31.1%, 185; a stricter one, a standard deviation of at most 8 / 16 / 24 rows:
    # 8.9 / 31.7%, 186; 9.0 / 31.9%, 185; 8.9 / 31.5%, 184 (docs/public-calibration.md, round 17).
    need = [PRIOR_HALF_ROWS[1] ** -2 if nm == "half_rows" else PIN_INFO for nm in names]
    p.pinned = frozenset(nm for nm, i, b, lim in zip(names, info, at_bound, need) if nm and i >= lim and not b)
    p.attention_info = float(info[0])
    # the rows' residuals at the solution, unweighted: sol.fun's first len(items) are w x log(pred / meas)
    # / ROW_SIGMA (`resid`)
    p.spread = float(np.median(np.abs(sol.fun[:len(items)]) * ROW_SIGMA / w))
    p.eager = all(it.row.setting_flag("enforce_eager") for it in items)
    p.rows = [it.row.row_id for it in items]
    p.sources = sorted({it.row.source for it in items})
    p.rows_here = sum(it.row.source.startswith(REPO_SOURCE) for it in items)
    p.seen_classes = classes
    p.current_share = current_share([it.row for it in items])
    return p


# ---- the ALU cost of K-quant mat-vec kernels on Apple GPUs (a kernel property, fitted across devices) --


MATVEC_GRID = (0.0, 8.0, 16.0, 24.0, 32.0, 40.0, 48.0, 64.0)


def fit_matvec_alu(prepared: list[Prepared], corpus: PublicCorpus) -> dict:
    """The K-quant mat-vec ALU cost on Apple GPUs: the value from MATVEC_GRID that, with every Apple
    llama.cpp group holding K-quant rows refitted, gives those groups' rows the smallest robust error.
    Leaves it set on `corpus` (`PublicCorpus.kquant_matvec_flops`). One number for llama.cpp's Metal
    kernels on every Apple GPU, scaled by each GPU's fp32 rate; chosen on all rows (a property of the kernels, not of a device),
    so the held-out errors reported for these rows are not independent of it.

    The evidence (XiongjieDai's Llama 3 8B Q4_K_M decode, one build on three Macs): 34.5 / 50.7 /
    76.3 tok/s on the M1 Max / M3 Max / M2 Ultra follow their fp32 rates (10.4 / 14.2 / 27.2 TFLOPS)
    more than their bandwidths (400 / 400 / 800 GB/s), while discussion #4167's Q4_0 decodes on the
    same chips follow bandwidth (M1 Max / M3 Max 0.92). At ~29 ms a token the M1 Max spends 40
    FLOP-equivalents per weight; the M3 Max 37."""
    from sim.catalog.hardware import load_profile
    from sim.catalog.quant import is_k_quant

    groups = _groups(prepared)
    keys = sorted({(it.row.device, it.family) for it in prepared
                   if it.shape is not None and it.family == "ggml" and load_profile(it.row.device).vendor == "Apple"
                   and is_k_quant(_row_objects(it.row, corpus=corpus)[3])})

    def put(c: float) -> None:
        corpus.kquant_matvec_flops = c or None

    best, scores = _grid_choice(MATVEC_GRID, put, groups, {k: groups[k] for k in keys}, corpus)
    return {"flops_per_weight": best, "devices": [d for d, _ in keys],
            "rows": sum(len(groups[k]) for k in keys),
            "loss_by_value": {f"{c:g}": round(v, 2) for c, v in scores.items()}}


# ---- routing skew of MoE models (a model property, fitted across devices) ---------------------------

POOL_GRID = (1.0, 0.8, 0.65, 0.5, 0.4, 0.32, 0.25)
# The least spread of a model's grid losses (robust-loss units, ROW_SIGMA-scaled: about a log-likelihood)
# for its rows to choose its routing: under it the best and the worst fraction fit the rows alike (a
# likelihood ratio under e) and the choice is the grid's first minimum, not evidence. Such a model keeps
# what it would have without those rows: tied to its synthetic benchmark's key where it has one, else
# uniform routing (1.0). TensorRT-LLM's offline Qwen3-30B-A3B rows (B200, GB200, RTX PRO 6000: batches
# of hundreds, every expert touched at any fraction) span 0.16 (43.71-43.87) and took 0.25, moving the
# single-sequence Qwen3-30B-A3B prompts of the RTX 4090 / 3090 / M2 Ultra from the DGX Spark's 0.5 and,
# through them, the Apple and GeForce llama.cpp transfers (held out by device, the devices before issue
# 39: 8.5 -> 8.9% median). Set after seeing that move.
ROUTING_MIN_SPREAD = 1.0


def fit_routing(prepared: list[Prepared], corpus: PublicCorpus) -> dict[str, dict]:
    """Per MoE model with rows of more than one sequence per step: the expert_pool_fraction
    (sim.cost `expected_distinct_experts`) from POOL_GRID that, with every group holding the model's
    rows refitted, gives those rows the smallest robust error. Leaves `corpus.pool` set to the
    choices. Chosen on all rows (a property of the model, not of a device): the held-out errors
    reported for these models are not independent of this choice. Keyed by `routing_key`: a
    benchmark of identical synthetic sequences (llama-batched-bench) gets a fraction of its own; a
    model with no multi-sequence rows but that benchmark's is tied to it (`tied_to`: the only
    routing evidence there is, shipped as the model's, and so not left to the catalog's last value).
    With one key for both, gpt-oss-120b's came out at 0.4, set by the DGX Spark's batched-bench
    rows, and the same Spark's vLLM decodes of real prompts at 64 sequences read 64% and 97% fast
    in sample (TP 1, TP 2); with two keys the model's own is 0.8 and those rows 12% and 40%
    (docs/public-calibration.md, round 21)."""
    from sim.catalog.lookup import get_model

    groups = _groups(prepared)
    multi = [it for it in prepared if it.shape is not None and get_model(it.row.model).is_moe
             and ((it.row.batch or 1) > 1 or it.row.metric == "offline")]
    out = {}
    models = sorted({routing_key(it.row) for it in multi})
    # A model whose own rows are all single-sequence (its multi-sequence rows are a synthetic
    # benchmark's) has no routing evidence of its own: its key follows the benchmark's, set together
    # with it, rather than whatever the catalog held from a previous run
    moe_models = {it.row.model for it in prepared if get_model(it.row.model).is_moe}
    tied = {m + SYNTHETIC_SUFFIX: m for m in moe_models if m not in models and m + SYNTHETIC_SUFFIX in models}
    # start every MoE model from uniform routing, whatever a previous fit wrote: the same corpus then
    # gives the same choices (models share groups, so the order is fixed: alphabetical)
    corpus.pool.update({m: 1.0 for m in moe_models | set(models)})

    def setter(key: str):
        def put(c: float) -> None:
            corpus.pool[key] = c
            if key in tied:
                corpus.pool[tied[key]] = c
        return put

    for model in models:
        mine = [it for it in multi if routing_key(it.row) == model]
        keys = sorted({(it.row.device, it.family) for it in mine})
        best, scores = _grid_choice(POOL_GRID, setter(model), groups,
                                    {k: [it for it in mine if (it.row.device, it.family) == k] for k in keys}, corpus)
        out[model] = {"expert_pool_fraction": best, "rows": len(mine),
                      "devices": sorted({it.row.device for it in mine}),
                      "loss_by_fraction": {f"{c:g}": round(v, 2) for c, v in scores.items()}}
        if max(scores.values()) - min(scores.values()) < ROUTING_MIN_SPREAD:
            # the rows do not tell the fractions apart (ROUTING_MIN_SPREAD): uniform routing, or the
            # synthetic benchmark's key (fitted after this one: the keys sort model < model@...) sets it
            setter(model)(1.0)
            out[model]["expert_pool_fraction"] = 1.0
            out[model]["uninformative"] = True
            if model + SYNTHETIC_SUFFIX in models:
                tied[model + SYNTHETIC_SUFFIX] = model
        if model in tied and not out.get(tied[model], {}).get("uninformative"):
            out[tied[model]] = {**out[model], "tied_to": model}
    for synthetic, model in tied.items():
        if out.get(model, {}).get("uninformative"):
            out[model].update(expert_pool_fraction=out[synthetic]["expert_pool_fraction"], tied_to=synthetic)
    return dict(sorted(out.items()))


def _groups(prepared: list[Prepared]) -> dict[tuple[str, str], list[Prepared]]:
    g: dict = defaultdict(list)
    for it in prepared:
        if it.shape is not None:
            g[(it.row.device, it.family)].append(it)
    return dict(sorted(g.items()))


def fit_all(prepared: list[Prepared], corpus: PublicCorpus | None = None) -> dict[tuple[str, str], GroupParams]:
    """One fit per (device, family) with rows."""
    return {k: fit_group(items, *k, corpus) for k, items in _groups(prepared).items()}
