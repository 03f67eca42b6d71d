"""A serving deployment's predicted prefill of one prompt, split into the cost model's kernel groups
(docs/long-prefill.md): for each curve matching a regex, the deployment as the serving fit replays it
(the curve's first load point: device, model, quant, engine preset, the point's overrides; `--set` engine
fields on top) and, per prompt length, the prompt's chunks (the engine's max_num_batched_tokens) summed:

  gemm_dense   the weight GEMMs outside the routed experts (attention projections, dense MLPs, shared
               experts, LM head) at the matmul roofline: their share of the GEMM phase by FLOPs
  gemm_moe     the routed experts' grouped GEMMs: the rest of the GEMM phase (`_layer_matmul_flops`' expert part)
  (floor)      how much of the GEMM phase is the per-layer kernel floor rather than FLOPs / bytes
  attention    the attention kernels at their roofline, max(attention FLOPs, K/V bytes): the part that
               grows with the context (quadratically in the prompt)
  comm         the TP all-reduces / transfers of the placement (0 on one device)
  overhead     the iteration + per-sequence overheads
  host         the replayed prefill alone (benchmarks/ttft_breakdown.alone: an idle server, no front end)
               less the four above: the eager-prefill launch floor's excess, the host stage, the first token

Every term is the simulator's own (sim.cost: `_kernel_terms` on one device, `_placed_terms` on a placement,
attention there as the difference of the compute line with and without the chunk's keys); nothing is
re-derived here.

    python benchmarks/prefill_split.py CURVE_REGEX [--prompts 1000,2000,4000,8000] [--set FIELD=VALUE ...]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # ttft_breakdown, a sibling script

from calibrate.serving.rows import curves, load_corpus, load_points  # noqa: E402
from ttft_breakdown import _fields, alone  # noqa: E402


def deployment(point, overrides: dict):
    """(hw, engine, parts) of `point` as the replay resolves it (calibrate/serving/replay.py point_deployment,
    sim.bench.serve.deployment_parts: the builder serve_replica uses)."""
    from calibrate.serving.replay import point_deployment
    from sim.bench.serve import deployment_parts

    return deployment_parts(point_deployment(point, overrides))


def chunk_terms(cost, p: int, c: int) -> dict:
    """Seconds of one prompt chunk of `p` tokens after `c` cached ones, by kernel group."""
    cost = getattr(cost, "target", cost)  # a speculative wrapper prices prompt chunks with its target
    t, n, keys, kv_read, dkeys = cost._aggregate((p,), (c,), ())
    k = cost.model.n_experts_active if cost.model.is_moe else 0
    if cost.placement is None:
        pp = cost._param_tuple()
        mm, w, att, kv, o = cost._kernel_terms(pp, t, n, keys, kv_read, dkeys)
        gemm_nofloor = max(mm, w)
        # the GEMM phase as the step prices it (floor included): the compute line less the attention
        c_line, _, _ = cost._terms(pp, t, n, keys, kv_read, dkeys)
        gemm, attention, comm, half = float(c_line - att), float(max(att, kv)), 0.0, pp[5]
    else:
        if cost.prompt_key_flops_ratio != 1.0:  # MLA prompt keys unabsorbed, as step_time passes them
            keys = cost.prompt_key_flops_ratio * (keys - dkeys) + dkeys
        parts, comm, o = cost._placed_terms(t, n, keys, kv_read, n, n)
        parts0, _, _ = cost._placed_terms(t, n, 0.0, kv_read, n, n)
        gemm = attention = 0.0
        for (c1, m1), (c0, _) in zip(parts, parts0):
            gemm += float(c0)  # the part's GEMM phase (its compute line without keys)
            attention += float(max(c1, m1) - c0)
        gemm_nofloor = None
        half = cost.placement.parts[0].matmul_half_rows
    layer = float(cost._layer_matmul_flops(t, half))
    moe_share = cost.expert_flops_per_row * t * k / (layer + cost.flops_per_sequence * n) if k else 0.0
    return {"gemm_dense": gemm * (1 - moe_share), "gemm_moe": gemm * moe_share, "attention": attention,
            "comm": float(comm), "overhead": float(o),
            "floor_excess": (gemm - gemm_nofloor) if gemm_nofloor is not None else float("nan")}


def prompt_split(point, overrides: dict, parts, engine, prompt: int, memo: dict) -> dict:
    budget = int(engine.max_num_batched_tokens or prompt)
    out: dict = {}
    c = 0
    while c < prompt:
        p = min(budget, prompt - c)
        for key, v in chunk_terms(parts.cost, p, c).items():
            out[key] = out.get(key, 0.0) + v
        c += p
    out["chunks"] = -(-prompt // budget)
    out["alone"] = alone(point, overrides, prompt, memo)
    out["host"] = out["alone"] - sum(out[x] for x in ("gemm_dense", "gemm_moe", "attention", "comm", "overhead"))
    return out


def unloaded(cid: str, point, overrides: dict, memo: dict) -> str:
    """One line: the curve's lowest-load point, measured TTFT beside the predicted prefill alone over the
    point's own prompts (median and mean: no front end, no queue) and the committed held-out prediction."""
    from ttft_breakdown import committed

    pf = np.array([alone(point, overrides, int(x), memo) for x in point.prompt_lens]) * 1e3
    got = committed(cid, float(point.load))
    meas = " ".join(f"{k} {m:.1f} (held-out {h:.1f})" for k, (m, h, _) in sorted(got.items()))
    return (f"    unloaded: load {point.load:g}, prompts mean {np.mean(point.prompt_lens):.0f} "
            f"[{min(point.prompt_lens)}-{max(point.prompt_lens)}]; predicted prefill alone median {np.median(pf):.1f} "
            f"mean {np.mean(pf):.1f} ms; measured TTFT {meas or '(no TTFT row)'}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("curve", help="regex on curve_id (every match is split)")
    ap.add_argument("--prompts", default="1000,2000,4000,8000,16000", help="prompt lengths [tokens], comma-separated")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="engine field over the preset")
    a = ap.parse_args(argv)
    ov = _fields(a.set)
    try:
        prompts = [int(x) for x in a.prompts.split(",")]
    except ValueError:
        raise SystemExit(f"--prompts wants comma-separated integers, got {a.prompts!r}")
    cs = curves(load_corpus())
    ids = sorted(c for c in cs if re.search(a.curve, c))
    if not ids:
        raise SystemExit(f"no curve_id matches {a.curve!r}")
    cols = ("gemm_dense", "gemm_moe", "attention", "comm", "overhead", "host")
    for cid in ids:
        point = min(load_points(cs[cid]), key=lambda p: p.load)
        hw, engine, parts = deployment(point, ov)
        prm = getattr(parts.cost, "target", parts.cost).params
        print(f"{cid}: {point.device} {point.model} {point.quant} engine {point.engine}, tp {engine.tp}, "
              f"chunk {engine.max_num_batched_tokens}, matmul {prm.matmul_flops_per_s / 1e12:.0f} TFLOP/s, "
              f"attention {prm.attention_flops_per_s / 1e12:.0f} TFLOP/s (per device); ms:")
        print("    prompt " + " ".join(f"{x:>10s}" for x in cols) + "   = alone  (attn share, floor excess)")
        memo: dict = {}
        print(unloaded(cid, point, ov, memo))
        for n in prompts:
            s = prompt_split(point, ov, parts, engine, n, memo)
            print(f"    {n:6d} " + " ".join(f"{1e3 * s[x]:10.1f}" for x in cols)
                  + f"   = {1e3 * s['alone']:6.1f}  ({s['attention'] / s['alone']:.0%}, {1e3 * s['floor_excess']:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
