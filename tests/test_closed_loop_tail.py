"""A closed loop's TTFT tail is set by its start burst (issue 38): `vllm bench serve --max-concurrency C
--request-rate inf` and `sglang.bench_serving` send their C first requests at t = 0, the last of them
waits for C prefills, and the p99 over N samples (np.percentile, linear) reads that burst's share C / N
of them. The serving fit must therefore replay the source's N prompts, not fewer (calibrate/serving/rows.py
`prompt_cap`)."""

from __future__ import annotations

import numpy as np

from calibrate import serving_fit as sf
from sim.bench.serve import Deployment, ServeClient, run_client
from tests.test_serving_fit import SETS, _curve


def test_a_closed_loop_replays_every_prompt_the_source_sent():
    assert sf.prompt_cap("concurrency", 10.0, 200) == 200  # was min(200, max(80, 32)) = 80
    assert sf.prompt_cap("concurrency", 1.0, 10) == 10
    assert sf.prompt_cap("rate", 2.0, 1000) == 400  # an open loop below saturation: unchanged
    assert sf.prompt_cap("rate", float("inf"), 1000) == 1000
    rows = _curve("burst", {c: {"ttft_ms|p99": 100.0, "ttft_ms|median": 50.0} for c in (4, 16)})
    for r in rows:
        r["num_prompts"] = str(20 * int(r["max_concurrency"]))  # the Red Hat sweeps' 20 C
    points = sf.load_points(rows, catalog=SETS["catalog"])
    assert [p.replayed_prompts for p in points] == [80, 320]


def _burst_client(n: int, c: int) -> ServeClient:
    return ServeClient(num_prompts=n, max_concurrency=c, random_input_len=2000, random_output_len=40,
                       percentile_metrics=("ttft",), metric_percentiles=(99.0,))


def test_the_replayed_p99_is_the_one_the_source_s_client_run_gives():
    """The fit's replay of a 20 C closed loop gives the p99 TTFT of the client run with all N prompts,
    which sits lower than a run of 8 C prompts (the burst is a larger share of fewer samples)."""
    c, n = 16, 320
    rows = _curve("burst", {c: {"ttft_ms|p99": 100.0}, 2 * c: {"ttft_ms|p99": 100.0}})
    for r in rows:  # vLLM 0.10: no front-end latency, so the burst alone sets the tail (0.11 ships 25 ms)
        r.update(num_prompts=str(n), input_tokens="2000", output_tokens="40", engine_version="0.10.2")
    p = sf.load_points(rows, catalog=SETS["catalog"])[0]
    assert p.engine == "vllm@0.10"
    pred = sf.replay(p)
    dep = Deployment(hw=p.device, model=p.model, quant=p.quant, engine=p.engine, overrides=p.overrides)
    full = run_client(_burst_client(n, c), dep, per_request=False)
    short = run_client(_burst_client(8 * c, c), dep, per_request=False)
    assert np.isclose(pred["ttft_ms|p99"], full["p99_ttft_ms"], rtol=1e-9)
    assert full["p99_ttft_ms"] < 0.97 * short["p99_ttft_ms"]


def test_the_report_splits_the_ttft_tail_by_source_and_region_with_the_same_points_p50():
    from calibrate.serving.ttft_tail import ttft_tail_markdown, ttft_tail_table

    def rec(src, reg, load, metric, err):
        return {"source": src, "region": reg, "curve_id": f"{src}-c", "load": load, "metric": metric, "error": err}

    recs = [rec("A", "below", 1.0, "ttft_p99", -0.9), rec("A", "below", 1.0, "ttft_p50", -0.85),
            rec("A", "below", 2.0, "ttft_p99", -0.8), rec("A", "below", 2.0, "ttft_p50", -0.95),
            rec("B", "below", 1.0, "ttft_p99", -0.5), rec("B", "below", 1.0, "ttft_p50", 0.02),
            rec("B", "below", 4.0, "ttft_p50", 0.5),  # no p99 row at this point: left out of the p50 column
            rec("B", "above", 8.0, "ttft_p99", 0.1), rec("B", "above", 8.0, "tpot_itl", 0.3)]
    t = {(r["source"], r["region"]): r for r in ttft_tail_table(recs)}
    assert t[("A", "below")]["ttft_p99"] == {"n": 2, "median_signed_pct": -85.0, "median_abs_pct": 85.0}
    assert t[("A", "below")]["ttft_p50"]["median_signed_pct"] == -90.0
    assert t[("B", "below")]["ttft_p50"] == {"n": 1, "median_signed_pct": 2.0, "median_abs_pct": 2.0}
    assert t[("B", "above")]["ttft_p50"] is None
    md = "\n".join(ttft_tail_markdown(recs))
    assert "| below knee | A | -85.0% / 85.0% (n=2) | -90.0% / 90.0% (n=2) |" in md
