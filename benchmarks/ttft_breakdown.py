"""One serving-corpus load point replayed, and its predicted TTFT taken apart (docs/ttft-misses.md): per
request, from the client's send to the first token,

  front end   the API server before the queue (workloads.arrivals.FrontEnd: the engine's request_overhead_ms,
              plus the wait for and the work of its serial front_request_ms server)
  queue       reached the scheduler's queue -> first scheduled (waits for running requests / a prefill slot)
  prefill     first scheduled -> first token, priced alone: the same prompt replayed on an idle server with
              no front end (its own prefill steps, chunked at the engine's token budget, and the first-token
              host work)
  interference  the rest of first scheduled -> first token: other requests' prefill chunks and decodes in the
              steps it shares (chunked-prefill / mixed-batch interference)

printed for the requests around the median TTFT (the 40th-60th percentile), beside the measured TTFT p50
and mean and the committed held-out prediction. Engine fields can be set (--set request_overhead_ms=15) to
replay the held-out fold's value (benchmarks/serving_fidelity.json, front_queue/host_stage folds).

    python benchmarks/ttft_breakdown.py CURVE_REGEX LOAD [LOAD ...] [--set FIELD=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import re

import numpy as np

from calibrate.serving.rows import ROOT, curves, load_corpus, load_points


def _fields(pairs: list[str]) -> dict:
    out = {}
    for p in pairs:
        if "=" not in p:
            raise SystemExit(f"--set wants FIELD=VALUE, got {p!r}")
        k, v = p.split("=", 1)
        out[k] = json.loads(v)
    return out


def run(point, overrides: dict) -> dict:
    """Replay `point` on the replay's own workload and deployment (calibrate/serving/replay.py), keeping the
    replica's per-request log (sim.bench.serve.serve_replica, which simulate_workload also runs)."""
    from calibrate.serving.replay import point_deployment, point_workload
    from sim.bench.serve import serve_replica
    from workloads.arrivals import FrontEnd

    served = serve_replica(point_workload(point), point_deployment(point, overrides),
                           max_concurrency=point.max_concurrency)
    rep, engine = served.replica, served.engine
    log, n = rep.log, rep.log.n
    order = np.array([int(i) for i in log.ids[:n]])
    sent, sched, first = (np.asarray(a[:n], dtype=float) for a in (log.arrival_s, log.scheduled_s, log.first_token_s))
    # when each request reached the queue: the front end's own rule (workloads.arrivals.FrontEnd), in send order
    reach = np.empty(n)
    by_send = np.argsort(sent, kind="stable")
    reach[by_send] = FrontEnd.of_engine(None, engine).reach_times((sent[j], log.ids[j]) for j in by_send)
    return {"engine": engine, "order": order, "sent": sent, "sched": sched, "first": first, "reach": reach,
            "prompts": np.array(point.prompt_lens)[order]}


def alone(point, overrides: dict, prompt: int, memo: dict) -> float:
    """TTFT (s) of one `prompt`-token request on an idle server with no front end: its prefill alone."""
    if prompt not in memo:
        from dataclasses import replace

        one = replace(point, prompt_lens=[prompt], output_lens=[2], release_s=[0.0], max_concurrency=1,
                      load_kind="concurrency", load=1.0)
        r = run(one, {**overrides, "request_overhead_ms": 0.0, "front_request_ms": 0.0})
        memo[prompt] = float(r["first"][0] - r["sent"][0])
    return memo[prompt]


def committed(curve_id: str, load: float) -> dict:
    d = json.loads((ROOT / "benchmarks" / "serving_fidelity.json").read_text())
    out = {}
    for r in d["rows"]:
        if r["metric"] == "ttft_p50" and r["curve_id"] == curve_id and float(r["load"]) == load:
            out[r["row_id"].rsplit("-", 1)[-1]] = (r["measured"], r["by_source"], r["baseline"])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("curve", help="regex on curve_id (the first match is replayed)")
    ap.add_argument("loads", nargs="+", type=float)
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="engine field over the preset")
    a = ap.parse_args(argv)
    ov = _fields(a.set)
    cs = curves(load_corpus())
    ids = sorted(c for c in cs if re.search(a.curve, c))
    if not ids:
        raise SystemExit(f"no curve_id matches {a.curve!r}")
    cid = ids[0]
    pts = {p.load: p for p in load_points(cs[cid])}
    print(f"{cid} (of {len(ids)} matching); engine fields over the preset: {ov or 'none'}")
    memo: dict = {}
    for load in a.loads:
        if load not in pts:
            raise SystemExit(f"load {load:g} not in {sorted(pts)}")
        p = pts[load]
        r = run(p, ov)
        ttft = r["first"] - r["sent"]
        lo, hi = np.percentile(ttft, [40, 60])
        mid = (ttft >= lo) & (ttft <= hi)
        fe = r["reach"] - r["sent"]
        q = r["sched"] - r["reach"]
        pf = np.array([alone(p, ov, int(x), memo) for x in r["prompts"][mid]])
        inter = (r["first"] - r["sched"])[mid] - pf
        e = r["engine"]
        print(f"  load {load:g} ({p.load_kind}, {len(ttft)} requests, prompt mean {np.mean(p.prompt_lens):.0f}, "
              f"engine {p.engine}: request_overhead_ms {e.request_overhead_ms:g}, front_request_ms "
              f"{getattr(e, 'front_request_ms', 0) or 0:g}, max_num_batched_tokens {e.max_num_batched_tokens}, "
              f"scheduler {e.scheduler})")
        print(f"    predicted TTFT p50 {1e3 * np.median(ttft):.1f} ms, mean {1e3 * np.mean(ttft):.1f} ms; the 40-60th pct "
              f"requests (n={int(mid.sum())}): front end {1e3 * np.mean(fe[mid]):.1f} + queue {1e3 * np.mean(q[mid]):.1f} "
              f"+ prefill alone {1e3 * np.mean(pf):.1f} + interference {1e3 * np.mean(inter):.1f} ms")
        for stat, (m, hs, b) in sorted(committed(cid, load).items()):
            print(f"    measured TTFT {stat} {m:.1f} ms; committed held-out prediction {hs:.1f} ms, baseline {b:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
