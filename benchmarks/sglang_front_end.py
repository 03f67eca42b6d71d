"""SGLang's unloaded TTFT offset against the setups the corpus states (docs/sglang-front-end.md). No replay, no fit:
it joins the committed baseline replay (benchmarks/serving_fidelity.json, metric ttft_p50, column `baseline`: the
presets with no front end) with the corpus rows and prints, per replayed SGLang curve and load, the measured TTFT
(median row, else mean), the baseline, the offset (measured - baseline) and the setup fields a user could state:
source, client endpoint, TTFT statistic, release, device, TP, EP, radix cache, stream interval, kernel-backend
flags, prompt mean (the replay's prompts, calibrate.serving.rows.load_points), dense/MoE.

    python benchmarks/sglang_front_end.py [--all-loads]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics as st
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from calibrate.serving.rows import curves, load_corpus, load_points  # noqa: E402


def flag(flags: str, *names: str) -> str | None:
    """The value of the first of `names` in a flag string ('' for a bare switch), None if absent."""
    for n in names:
        m = re.search(rf"(?:^|\s){re.escape(n)}(?:[=\s]+([^-\s][^\s]*))?(?=\s|$)", flags)
        if m:
            return m.group(1) or ""
    return None


def setup(r: dict) -> dict:
    """What the corpus row states about how the run was taken (the fields a user could give the simulator)."""
    f = r.get("engine_flags") or ""
    client = r["client"]
    # sglang.bench_serving --backend sglang posts to the native /generate; the InferenceX client (custom) and
    # vLLM's benchmark_serving post to /v1/completions (backend vllm / openai)
    endpoint = "/generate" if client == "sglang-bench-serving" else "/v1/completions"
    pub = r["publisher"]
    src = ("cookbook" if "cookbook" in pub else "InferenceX" if pub == "SemiAnalysis" else
           "RedHat" if "Red Hat" in pub else "DataCrunch" if "DataCrunch" in pub else pub[:12])
    ns = "n/s" if not f.strip() else None  # no flags recorded: what the run set is not stated, not a default
    return {"src": src, "version": r["engine_version"].split(" ")[0], "device": r["device"], "tp": int(r["tp"]),
            "ep": ns or flag(f, "--ep", "--ep-size") or "1", "endpoint": endpoint,
            "radix": ns or ("off" if flag(f, "--disable-radix-cache") is not None else "on"),
            "stream_interval": ns or flag(f, "--stream-interval") or "1",
            "attn": ns or flag(f, "--attention-backend") or "default",
            "moe_runner": ns or flag(f, "--moe-runner-backend") or "default",
            "ar_fusion": "on" if flag(f, "--enable-flashinfer-allreduce-fusion") is not None else "default",
            "dp_attn": "on" if flag(f, "--enable-dp-attention") is not None else "off",
            "tok_flags": " ".join(x for x in ("--tokenizer-worker-num", "--skip-tokenizer-init",
                                              "--enable-mixed-chunk", "--enable-torch-compile")
                                  if flag(f, x) is not None) or "-"}


def records() -> list[dict]:
    data = json.loads((ROOT / "benchmarks" / "serving_fidelity.json").read_text())
    corpus = {r["row_id"]: r for r in load_corpus()}
    by_curve = curves(list(corpus.values()))
    from sim.catalog import cache
    out, pts_cache = [], {}
    for fr in data["rows"]:
        c = corpus[fr["row_id"]]
        if fr["metric"] != "ttft_p50" or c["engine"] != "sglang":
            continue
        cid = fr["curve_id"]
        if cid not in pts_cache:
            pts_cache[cid] = {p.load: p for p in load_points(by_curve[cid])}
        p = pts_cache[cid][float(fr["load"])]
        tpot = p.measured.get(("tpot_ms", "median")) or p.measured.get(("tpot_ms", "mean"))
        m = cache.model(p.model)
        out.append({**setup(c), "curve": cid, "release": p.engine, "load": float(fr["load"]),
                    "stat": c["statistic"], "measured": fr["measured"], "baseline": fr["baseline"],
                    "excess": fr["measured"] - fr["baseline"], "prompt": st.mean(p.prompt_lens),
                    "n": p.replayed_prompts, "tpot": tpot, "model": p.model, "quant": p.quant, "moe": bool(m.is_moe),
                    "layers": m.n_layers})
    # one statistic per point: the median row where the source prints one, else the mean
    keep = {}
    for r in out:
        k = (r["curve"], r["load"])
        if k not in keep or (r["stat"] == "median" and keep[k]["stat"] != "median"):
            keep[k] = r
    return sorted(keep.values(), key=lambda r: (r["src"], r["curve"], r["load"]))


def lowest(recs: list[dict]) -> list[dict]:
    lo = {}
    for r in recs:
        if r["curve"] not in lo or r["load"] < lo[r["curve"]]["load"]:
            lo[r["curve"]] = r
    return list(lo.values())


def summary(label: str, xs: list[float]) -> str:
    if not xs:
        return f"{label:<44} n=0"
    q = st.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return (f"{label:<44} n={len(xs):>2} median {st.median(xs):7.1f}  quartiles {q[0]:7.1f} / {q[2]:7.1f}"
            f"  range {min(xs):7.1f} .. {max(xs):7.1f}")


def qcd(xs: list[float]) -> float:
    """Quartile coefficient of dispersion (Q3 - Q1) / (Q3 + Q1): a scale-free spread, comparable across forms."""
    q = st.quantiles(xs, n=4)
    return (q[2] - q[0]) / (q[2] + q[0])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--all-loads", action="store_true", help="print every load point, not only each curve's lowest")
    a = ap.parse_args(argv)
    recs = records()
    lows = lowest(recs)
    rows = recs if a.all_loads else lows
    print(f"{'curve':<62} {'src':<10} {'ver':<11} {'dev':<8} tp ep {'endpoint':<15} {'stat':<6} radix si "
          f"{'attn':<10} {'moe_runner':<17} {'C':>4} {'prompt':>6} {'meas':>7} {'base':>7} {'excess':>7} {'TPOT':>5}")
    for r in rows:
        tp = f"{r['tpot']:5.1f}" if r["tpot"] else "    -"
        print(f"{r['curve'][:62]:<62} {r['src']:<10} {r['version'][:11]:<11} {r['device']:<8} {r['tp']:>2} "
              f"{r['ep']:>2} {r['endpoint']:<15} {r['stat']:<6} {r['radix']:<5} {r['stream_interval']:>3} "
              f"{r['attn'][:10]:<10} {r['moe_runner'][:17]:<17} {r['load']:4g} {r['prompt']:6.0f} "
              f"{r['measured']:7.1f} {r['baseline']:7.1f} {r['excess']:7.1f} {tp}")
    print(f"\nstated on no curve: DP attention {sorted({r['dp_attn'] for r in lows})}, "
          f"tokenizer/mixed-chunk/compile flags {sorted({r['tok_flags'] for r in lows})}")

    # the unloaded offset of short-prompt curves (<= 1,100 tokens: the front end, not a long prefill) by setup
    short = [r for r in lows if r["prompt"] <= 1100]
    print("\nLowest-load offset (measured - baseline, ms), prompts <= 1,100 tokens:")
    for key in ("src", "release", "endpoint", "stat", "radix", "moe", "device", "tp", "attn"):
        groups = defaultdict(list)
        for r in short:
            groups[r[key]].append(r["excess"])
        for g, xs in sorted(groups.items(), key=lambda kv: str(kv[0])):
            print(summary(f"  {key}={g}", xs))

    # prompt length: curves of one source, model and device at two prompt means (the cookbook's 1k and 8k pages)
    print("\nSame source, model, quant, device, TP and load, different prompt mean: offset change per prompt token")
    pairs = defaultdict(list)
    for r in lows:
        pairs[(r["src"], r["model"], r["device"], r["tp"], r["load"], r["quant"])].append(r)
    for k, rs in sorted(pairs.items()):
        if len(rs) < 2:
            continue
        rs = sorted(rs, key=lambda r: r["prompt"])
        for lo_, hi in zip(rs, rs[1:]):
            dp = hi["prompt"] - lo_["prompt"]
            d = hi["excess"] - lo_["excess"]
            per = f"{1000 * d / dp:7.1f} us/token" if dp > 50 else "  (same prompt mean: repeat spread)"
            print(f"  {k[1][:34]:<34} {k[2]:<8} {lo_['prompt']:5.0f} -> {hi['prompt']:5.0f} tokens: offset "
                  f"{lo_['excess']:6.1f} -> {hi['excess']:6.1f} ms {per}")

    # which form makes the cookbook's short-prompt C=1 offsets most uniform (no fit: the spread of each form)
    ck = [r for r in short if r["src"] == "cookbook" and r["load"] == 1 and r["tpot"]]
    print(f"\nCookbook, C=1, prompts <= 1,100 tokens (n={len(ck)}): spread of three readings of the offset")
    for name, xs in (("additive: excess [ms]", [r["excess"] for r in ck]),
                     ("host-speed: measured / baseline", [r["measured"] / r["baseline"] for r in ck]),
                     ("per-step: excess / measured TPOT", [r["excess"] / r["tpot"] for r in ck])):
        print(f"{summary('  ' + name, xs)}  QCD {qcd(xs):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
