"""llama-batched-bench's batch decode step, measured against predicted, and the predicted step split into the cost
model's terms (docs/static-step.md): for each llama-batched-bench curve of benchmarks/serving/*.csv matching a regex,
per B, the measured step (tpot_ms = T_TG / TG) and T_PP (ttft_ms) beside the replay's (`predict_row`, the serving
corpus's replay as benchmarks/static_tools.py runs it), and one decode step of B sequences at the middle of the tool's
decode phase (context PP + TG / 2) priced by the deployment's own cost model, term by term:

  E_T        distinct routed experts the B tokens touch per MoE layer (`expected_distinct_experts`, the model's
             `expert_pool_fraction`)
  w_dense    the non-expert weights (attention, router, LM head) streamed at the fitted bandwidth
  w_exp      the E_T touched experts' weights streamed (E_T x one expert's bytes / bandwidth)
  floor      the per-layer kernel floor (`gemm_floor_s` + `layer_floor_stream_s`), when the engine has one
  mm_dense   the non-expert matmul FLOPs at the fitted matmul rate (with the start-up rows, `gemm_start_rows`)
  mm_exp     the routed experts' matmul FLOP-equivalents (`moe_expert_rows`: MMQ tiles of the batch's width per
             touched expert, each with the start-up) at the fitted matmul rate
  tile       llama.cpp's CUDA MMQ tile traffic at the datasheet bandwidth (`_mmq_tile_s`; 0 at up to 8 rows)
  gemm       the weight GEMMs: max(mm_dense + mm_exp (or tile), w_dense + w_exp (or floor)) = max(matmul_s, weights_s)
  attn       the attention kernels: max(attention FLOPs, K/V bytes)
  ovh        iteration + per-sequence overheads
  step       gemm + attn + ovh (x the decode correction where a profile has one), the cost model's step_time
  c_imp      the expert_pool_fraction at which that step equals the measured one (`implied_pool`)
  Emxds      the most distinct experts per MoE layer the measured step can stream: all of it at the datasheet
             bandwidth, the non-expert weights first, nothing else (a physical bound on E_T)
  Emxft      the same at the fitted bandwidth after the predicted attn and ovh

Every term is the cost model's own function (sim.cost.roofline `_kernel_terms`, `weight_bytes_read`,
`_layer_matmul_flops`, `_mmq_tile_s`; sim.cost.kernels; sim.cost.llamacpp `moe_expert_rows`); the mm_dense / mm_exp
split calls the same functions with the expert part alone. `--pool MODEL=FRACTION` replays and prices with that
routing skew instead of the catalog's (in-process: nothing is written), e.g. the public fit's fraction for the
benchmark's identical-token sequences (benchmarks/public_fit_state.json pool["gpt-oss-120b@identical-tokens"]).

    PYTHONPATH=. python benchmarks/static_step_split.py [CURVE_REGEX] [--pool MODEL=FRACTION ...] [--no-replay]
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

TERMS = ("w_dense", "w_exp", "floor", "mm_dense", "mm_exp", "tile", "gemm", "attn", "ovh", "step")


def batched_bench_points(regex: str) -> dict[tuple[str, int], dict[str, dict]]:
    """{(curve_id, B): {quantity: row}} of the llama-batched-bench rows in benchmarks/serving/*.csv whose curve
    matches `regex`."""
    from static_tools import static_points  # benchmarks/ sibling: every static-batch tool's rows by point

    out: dict[tuple[str, int], dict[str, dict]] = defaultdict(dict)
    for (cid, conc), rows in static_points().items():
        for r in rows:
            if "llama-batched-bench" in (r.get("client") or "") and re.search(regex, cid):
                out[(cid, int(float(conc)))][r["quantity"]] = r
    return out


def with_pools(pools: dict[str, float]):
    """A context in which the catalog's models carry `pools` as their expert_pool_fraction, also where a
    batched-bench row would route with the benchmark's own fraction (the simulator's model cache,
    sim.catalog.cache.model, and sim.bench.corpus.benchmark_routing patched in this process only; nothing is
    written)."""
    from contextlib import contextmanager

    import sim.bench.corpus as corpus
    import sim.catalog.cache as cache

    @contextmanager
    def ctx():
        orig, orig_routing = cache.model, corpus.benchmark_routing

        def patched(name: str):
            spec = orig(name)
            if spec.name in pools:
                spec = spec.model_copy(update={"expert_pool_fraction": pools[spec.name]})
            return spec

        def routing(client: str, model: str):
            own = orig_routing(client, model)
            return {"expert_pool_fraction": pools[model]} if own is not None and model in pools else own

        cache.model, corpus.benchmark_routing = patched, routing
        try:
            yield
        finally:
            cache.model, corpus.benchmark_routing = orig, orig_routing

    return ctx()


def step_terms(cost, b: int, context: int) -> dict:
    """The cost model's terms of one decode step of `b` sequences at `context` cached tokens each [s]."""
    from sim.cost.kernels import expected_distinct_experts, layer_floor_stream_s
    from sim.cost.llamacpp import gemm_rows, gemm_start_rows, moe_expert_rows
    from sim.cost.kernels import pool_experts

    t, n, keys, kv_read, dkeys = cost._aggregate((), (), [context] * b)
    p = cost._param_tuple()
    bw, mm_rate, half = p[0], p[1], p[5]
    matmul_s, weights_s, att_s, kv_s, ovh = cost._kernel_terms(p, t, n, keys, kv_read, dkeys)
    m = cost.model
    out = {"E_T": 0.0, "w_dense": cost.non_expert_bytes / bw if m.is_moe else cost.dense_weight_bytes / bw}
    if m.is_moe:
        k = m.n_experts_active
        out["E_T"] = float(expected_distinct_experts(m.n_experts, k, t, m.expert_pool_fraction))
        out["w_exp"] = (float(cost.weight_bytes_read(t)) - cost.non_expert_bytes) / bw
        if cost.moe_expert_tile:
            e_c = pool_experts(m.n_experts, k, m.expert_pool_fraction)
            exp_flops = cost.expert_flops_per_row * moe_expert_rows(t, k, e_c, cost.moe_expert_tile, half)
        else:  # the Hockney start-up per touched expert (`_layer_matmul_flops`' expert part)
            exp_flops = cost._layer_matmul_flops(t, half) - cost.non_expert_flops_per_token * gemm_start_rows(t, half)
        out["mm_exp"] = float(exp_flops) / mm_rate
        dense_flops = cost.non_expert_flops_per_token * gemm_start_rows(t, half)
    else:
        out["w_exp"] = out["mm_exp"] = 0.0
        dense_flops = cost.flops_per_token * gemm_start_rows(t, half)
    out["mm_dense"] = float(dense_flops + cost.flops_per_sequence * gemm_rows(n, half)
                            + cost.recurrent_flops_per_token * t) / mm_rate
    out["tile"] = float(cost._mmq_tile_s(t)) if cost.mmq_tile_bandwidth > 0 else 0.0
    out["floor"] = float(cost.gemm_floor_s + layer_floor_stream_s(cost, t, bw)) if cost.gemm_floor_s > 0 else 0.0
    out["gemm"] = float(max(matmul_s, weights_s))
    out["gemm_bound"] = "mm" if matmul_s > weights_s else "mem"
    out["attn"] = float(max(att_s, kv_s))
    out["ovh"] = float(ovh)
    out["step"] = float(cost.step_time((), (), [context] * b))
    return out


def point_split(rows: dict[str, dict], replay: bool) -> dict:
    """Measured and predicted figures of one (curve, B) and the cost model's step terms."""
    from sim.bench.corpus import _row_point, predict_row
    from sim.bench.serve import deployment_parts

    row = rows.get("tpot_ms") or next(iter(rows.values()))
    _, _, dep, lengths = _row_point(row)
    hw, engine, parts = deployment_parts(dep)
    pp, tg = int(lengths[0][0]), int(lengths[1][0])
    out = {"meas_step": float(rows["tpot_ms"]["value"]) / 1e3 if "tpot_ms" in rows else float("nan"),
           "meas_tpp": float(rows["ttft_ms"]["value"]) / 1e3 if "ttft_ms" in rows else float("nan")}
    if replay:
        pred = predict_row(row)
        out["pred_step"] = pred.get(("tpot_ms", "mean"), float("nan")) / 1e3
        out["pred_tpp"] = pred.get(("ttft_ms", "mean"), float("nan")) / 1e3
    cost = getattr(parts.cost, "target", parts.cost)
    out.update(step_terms(cost, len(lengths[0]), pp + tg // 2))
    out["pool"] = cost.model.expert_pool_fraction if cost.model.is_moe else float("nan")
    # the most distinct experts per MoE layer the measured step has room for: its whole time streaming weights at the
    # datasheet bandwidth (nothing else), and at the fitted bandwidth after the predicted attention and overheads
    if cost.model.is_moe and out["meas_step"] == out["meas_step"]:
        one = cost.expert_bytes
        ds = hw.memory_bandwidth_gb_per_s * 1e9
        out["E_max_ds"] = (out["meas_step"] * ds - cost.non_expert_bytes) / one
        bw = cost._param_tuple()[0]
        out["E_max_fit"] = ((out["meas_step"] - out["attn"] - out["ovh"]) * bw - cost.non_expert_bytes) / one
    else:
        out["E_max_ds"] = out["E_max_fit"] = float("nan")
    out["implied_pool"] = implied_pool(hw, cost, parts, engine, len(lengths[0]), pp + tg // 2, out["meas_step"])
    return out


def implied_pool(hw, cost, parts, engine, b: int, context: int, measured_s: float) -> float:
    """The expert_pool_fraction c at which the cost model's step of `b` decodes at `context` equals the measured
    step (bisection on c in [k / E, 1]: the step grows with c), everything else as shipped; nan for a dense model
    or B = 1 (no c dependence), -inf / inf when the measured step lies below c = k / E's or above c = 1's."""
    from sim.cost.speculative import make_cost_model

    m = cost.model
    if not m.is_moe or b < 2:
        return float("nan")

    def step(c: float) -> float:
        spec = m.model_copy(update={"expert_pool_fraction": c})
        return make_cost_model(hw, spec, cost.quant, engine, params=parts.params).step_time((), (), [context] * b)

    lo, hi = m.n_experts_active / m.n_experts, 1.0
    if measured_s < step(lo):
        return float("-inf")
    if measured_s > step(hi):
        return float("inf")
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if step(mid) < measured_s else (lo, mid)
    return 0.5 * (lo + hi)


def kernel_rows(model_regex: str, pools: dict[str, float]) -> None:
    """The same batches as the public (kernel-level) corpus holds them: every llama.cpp row of a matching model with
    a batch above 1 or a decode figure (benchmarks/public/*.csv), the saved public fit's in-sample prediction
    (calibrate.public_fit `predict` with the shipped group parameters, `params_for`) under the routing skew the fit
    replays the row with (the saved state's pool, keyed by `routing_key`: model@identical-tokens for
    llama-batched-bench), the same parameters under the catalog's skew (what the simulator holds), and the saved
    held-out-by-device (lodo) and by-model (lomo) errors (benchmarks/public_fit_state.json). Decode rates are shown
    as the batch step, B / rate."""
    import json

    from calibrate.public.replay import routing_key
    from calibrate.public.state import STATE_FILE, load_state
    from calibrate.public_corpus import default_corpus_dir
    from calibrate.public_fit import params_for, predict, prepare

    v = load_state(default_corpus_dir(), STATE_FILE, check=False)
    corpus = v.corpus
    corpus.pool.update({m: f for m, f in pools.items()})  # --pool applies to the model's own key
    held = {h[0]: (h[4], h[5]) for h in json.loads((ROOT / "benchmarks" / "public_fit_state.json").read_text())["held"]}
    rows = [r for r in corpus.rows if re.search(model_regex, r.model) and r.engine == "llama.cpp"
            and r.quantity == "decode_tps"]
    print(f"\npublic corpus: llama.cpp decode rows of {model_regex!r} (step = B / decode_tps, ms; fit = saved fit's "
          "in-sample prediction)")
    print(f"{'row_id':<58} {'dev':<16} {'B':>3} {'meas':>7} {'fit':>7} {'f/m':>5} {'pool':>5} | {'catalog':>7} {'c/m':>5}"
          f" {'pool':>5} | {'lodo':>6} {'lomo':>6}")
    catalog = {}
    for it in prepare(rows, corpus):
        if it.shape is None:
            continue
        r = it.row
        p = params_for(r.device, it.family, v.fits, corpus=corpus)
        if p is None:
            continue
        b = r.batch or 1
        fit = predict(r, it.shape, p, corpus=corpus)
        key = routing_key(r)
        saved = dict(corpus.pool)
        corpus.pool.pop(key, None)  # no fitted skew for the row's key: the catalog's (what the simulator holds)
        cat = predict(r, it.shape, p, corpus=corpus)
        corpus.pool.update(saved)
        cat_pool = catalog.setdefault(r.model, _catalog_pool(r.model))
        lodo, lomo = held.get(r.row_id, (None, None))
        m, f, c = b / r.value * 1e3, b / fit * 1e3, b / cat * 1e3
        print(f"{r.row_id:<58} {r.device:<16} {b:>3} {m:7.2f} {f:7.2f} {f / m:5.2f} {saved.get(key, float('nan')):5.2f}"
              f" | {c:7.2f} {c / m:5.2f} {cat_pool:5.2f} | "
              + " ".join(f"{x:+6.1%}" if x is not None else f"{'':>6}" for x in (lodo, lomo)))


def routing_forms(model: str, zipf: list[float], pools: list[float]) -> None:
    """Distinct experts per MoE layer E_T against the tokens T of a pass under two routing forms: the cost model's
    uniform pool (`expected_distinct_experts` with expert_pool_fraction c) and, as a diagnostic only (not the cost
    model's), a skewed popularity: expert i (1..E) is among a token's k with probability p_i = min(1, k i^-s / sum_j
    j^-s) (Zipf exponent s; s = 0 is uniform routing over all E), independently per token, E_T = sum_i 1 - (1 -
    p_i)^T. A uniform pool saturates at c E; a skewed popularity keeps growing (long prompts reach the tail)."""
    from sim.catalog.lookup import get_model
    from sim.cost.kernels import expected_distinct_experts

    m = get_model(model)
    e, k = m.n_experts, m.n_experts_active
    ts = (1, 2, 4, 8, 16, 32, 512, 2048, 16384)
    print(f"\n{model}: distinct experts per MoE layer E_T by tokens per pass T (E = {e}, k = {k})")
    print(f"{'form':<16} " + " ".join(f"{t:>6}" for t in ts))
    for c in pools:
        print(f"{'pool c=' + format(c, 'g'):<16} "
              + " ".join(f"{float(expected_distinct_experts(e, k, t, c)):6.1f}" for t in ts))
    i = np.arange(1, e + 1, dtype=float)
    for z in zipf:
        w = i ** -z
        p = np.minimum(1.0, k * w / w.sum())
        print(f"{'zipf s=' + format(z, 'g'):<16} " + " ".join(f"{float(np.sum(1 - (1 - p) ** t)):6.1f}" for t in ts))


def _catalog_pool(model: str) -> float:
    from sim.catalog.lookup import get_model

    return get_model(model).expert_pool_fraction


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("curve", nargs="?", default=r"batchedbench-gpt-oss", help="regex on curve_id")
    ap.add_argument("--pool", action="append", default=[], metavar="MODEL=FRACTION",
                    help="replay and price MODEL with this expert_pool_fraction (in-process what-if)")
    ap.add_argument("--no-replay", action="store_true", help="cost-model terms only (no predict_row replay)")
    ap.add_argument("--kernel", metavar="MODEL_REGEX",
                    help="also the public corpus's llama.cpp decode rows of these models (`kernel_rows`)")
    ap.add_argument("--forms", metavar="MODEL", help="also E_T by T under uniform pools and skewed popularity")
    a = ap.parse_args(argv)
    pools = {}
    for s in a.pool:
        name, _, v = s.partition("=")
        pools[name.strip()] = float(v)
    pts = batched_bench_points(a.curve)
    if not pts:
        raise SystemExit(f"no llama-batched-bench curve matches {a.curve!r}")
    ratios: dict[str, list[float]] = defaultdict(list)
    tpp: dict[str, list[float]] = defaultdict(list)
    with with_pools(pools):
        cur = None
        for (cid, b) in sorted(pts, key=lambda k: (k[0], k[1])):
            s = point_split(pts[(cid, b)], not a.no_replay)
            if cid != cur:
                cur = cid
                print(f"\n{cid}  (expert_pool_fraction {s['pool']:g}; ms; step terms at context PP + TG/2)")
                print(f"{'B':>3} {'meas':>7} {'pred':>7} {'p/m':>5} | {'E_T':>5} "
                      + " ".join(f"{x:>8}" for x in TERMS) + f" {'bound':>5} {'c_imp':>5} {'Emxds':>5} {'Emxft':>5} | {'TPP m':>7} {'TPP p':>7} {'p/m':>5}")
            pred = s.get("pred_step", float("nan"))
            r_step = pred / s["meas_step"]
            r_tpp = s.get("pred_tpp", float("nan")) / s["meas_tpp"]
            ratios[cid.split("batchedbench-")[-1].rsplit("-pp", 1)[0] + f" B={b}"].append(r_step)
            tpp[cid.split("batchedbench-")[-1].rsplit("-pp", 1)[0] + f" B={b}"].append(r_tpp)
            print(f"{b:>3} {1e3 * s['meas_step']:7.2f} {1e3 * pred:7.2f} {r_step:5.2f} | {s['E_T']:5.1f} "
                  + " ".join(f"{1e3 * s[x]:8.2f}" for x in TERMS)
                  + f" {s['gemm_bound']:>5} {s['implied_pool']:5.2f} {s['E_max_ds']:5.1f} {s['E_max_fit']:5.1f} | {1e3 * s['meas_tpp']:7.0f} {1e3 * s.get('pred_tpp', float('nan')):7.0f}"
                  f" {r_tpp:5.2f}")
    if not a.no_replay:
        print("\npredicted / measured, over the matching curves' prompt lengths (median, min-max):")
        print(f"  {'':<40} {'step':<17} T_PP")
        for key in sorted(ratios, key=lambda k: (k.split(" B=")[0], int(k.split("B=")[1]))):
            v, w = ratios[key], tpp[key]
            print(f"  {key:<40} {np.median(v):5.2f} ({min(v):.2f}-{max(v):.2f})  {np.median(w):5.2f} ({min(w):.2f}-{max(w):.2f})")
    if a.kernel:
        kernel_rows(a.kernel, pools)
    if a.forms:
        routing_forms(a.forms, [0.0, 0.5, 0.8, 1.0, 1.2], [0.8, 0.4, 0.25])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
