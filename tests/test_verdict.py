"""The steady-state verdict (sim.engine.verdict) on synthetic queues whose answer is known, and on the simulator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.engine.verdict import min_requests_for, short_text, steady_state_verdict


def fifo_queue(arrival_s: np.ndarray, service_s: np.ndarray, servers: int = 1) -> np.ndarray:
    """Departure times of a first-come-first-served queue with `servers` identical servers."""
    free = np.zeros(servers)
    out = np.empty_like(arrival_s)
    for i, (a, s) in enumerate(zip(arrival_s, service_s)):
        k = int(np.argmin(free))
        start = max(a, free[k])
        free[k] = out[i] = start + s
    return out


def poisson(rate_rps: float, n: int, rng) -> np.ndarray:
    return np.cumsum(rng.exponential(1 / rate_rps, n))


def verdict_of(arr, fin, q=0.9):
    return steady_state_verdict(arr, fin, np.ones(len(arr), dtype=bool), percentile=q)


@pytest.mark.parametrize("seed", range(5))
def test_underloaded_queue_is_stable(seed):
    rng = np.random.default_rng(seed)
    arr = poisson(10.0, 3000, rng)  # utilisation 0.8: 10 req/s offered, 4 servers x 1 / 0.32 s
    fin = fifo_queue(arr, rng.exponential(0.32, len(arr)), servers=4)
    v = verdict_of(arr, fin)
    assert v["state"] == "stable", v["text"]
    assert v["offered_rps"] == pytest.approx(10.0, rel=0.1)
    assert abs(v["in_system_growth_rps"]) < 0.05 * v["offered_rps"]


@pytest.mark.parametrize("seed", range(5))
def test_overloaded_queue_is_flagged_from_its_start_with_offered_and_served_rates(seed):
    rng = np.random.default_rng(seed)
    arr = poisson(10.0, 3000, rng)  # capacity 4 / 0.5 s = 8 req/s < 10 req/s
    fin = fifo_queue(arr, rng.exponential(0.5, len(arr)), servers=4)
    v = verdict_of(arr, fin)
    assert v["state"] == "overloaded", v["text"]
    assert v["overloaded_from_s"] < 0.2 * arr[-1]  # a random walk with drift: it may hover a while first
    assert v["served_rps"] == pytest.approx(8.0, rel=0.1)
    assert v["offered_rps"] == pytest.approx(10.0, rel=0.1)
    assert v["text"].startswith("overloaded from t = ")


def test_overload_onset_is_when_the_arrival_rate_passes_capacity():
    rng = np.random.default_rng(7)
    calm = poisson(5.0, 500, rng)  # 100 s at 5 req/s, then 15 req/s against a capacity of 10
    busy = calm[-1] + poisson(15.0, 3000, rng)
    arr = np.concatenate([calm, busy])
    fin = fifo_queue(arr, np.full(len(arr), 0.1))
    v = verdict_of(arr, fin)
    assert v["state"] == "overloaded"
    assert v["overloaded_from_s"] == pytest.approx(calm[-1], abs=5.0)
    assert short_text(v).startswith("overloaded @")


def test_a_burst_that_drains_before_the_end_is_not_called_overloaded():
    rng = np.random.default_rng(3)
    arr = np.sort(np.concatenate([poisson(5.0, 3000, rng), 100 + rng.uniform(0, 5, 200)]))
    fin = fifo_queue(arr, np.full(len(arr), 0.1))
    assert verdict_of(arr, fin)["state"] == "stable"


def test_a_trace_shorter_than_ten_latencies_is_too_short():
    arr = np.arange(200) * 0.05  # 10 s of arrivals, each request 2 s in the system, no queueing
    v = verdict_of(arr, arr + 2.0)
    assert v["state"] == "too_short"
    assert "too short to reach steady state" in v["text"]


def test_too_few_requests_for_the_percentile_follows_ten_over_one_minus_q():
    assert min_requests_for(0.9) == 100
    assert min_requests_for(0.99) == 1000
    arr = np.arange(500) * 1.0
    fin = arr + 0.01
    assert verdict_of(arr, fin, q=0.9)["state"] == "stable"
    v = verdict_of(arr, fin, q=0.99)
    assert v["state"] == "too_few_requests"
    assert v["text"] == "too few requests for p99 (500 completed < 1,000)"


def test_requests_still_in_the_system_at_the_end_count_as_queued():
    arr = np.arange(400) * 0.1
    fin = np.where(arr < 20, arr + 0.05, np.nan)  # service stopped at t = 20 s
    v = verdict_of(arr, fin)
    assert v["state"] == "overloaded"
    assert v["overloaded_from_s"] == pytest.approx(20, abs=0.2)


# ---- through the simulator, the sweep and the CLI ------------------------------------------------

CHAT = "workloads/examples/chat.jsonl"


def _run(**kw):
    from sim.api import make_spec, run_spec

    return run_spec(make_spec(trace=CHAT, hw="h100-sxm", record_iterations=False, **kw)).summary


def test_simulated_run_at_its_own_rate_is_not_overloaded_and_at_thirty_times_is():
    calm = _run()["verdict"]
    assert "overloaded" not in calm["issues"]
    assert calm["issues"] == ["too_few_requests"]  # 200 requests cannot support a p99
    hot = _run(rate_scale=30.0)
    v = hot["verdict"]
    assert v["state"] == "overloaded"
    assert v["served_rps"] < 0.8 * v["offered_rps"]
    # the served rate it reports is what the run completed, not what was offered
    assert v["served_rps"] == pytest.approx(hot["throughput"]["requests_per_s"], rel=0.35)


def test_sweep_point_that_misses_its_slo_or_is_overloaded_is_never_ok(tmp_path):
    from sim.plan.executors import SerialExecutor
    from sim.plan.results import point_status
    from sim.plan.runner import run_sweep
    from sim.plan.sweep import load_sweep

    p = tmp_path / "s.yaml"
    p.write_text(f"trace: {Path(CHAT).resolve()}\nhw: h100-sxm\nslo: {{ttft_p90: 1s}}\n"
                 "grid:\n  rate_scale: [1, 40]\n")
    out = run_sweep(load_sweep(p), tmp_path / "out", SerialExecutor(), report=False)
    df = out.frame
    calm, hot = (df.iloc[i] for i in (0, 1))
    assert (df["status"] == "ok").all()  # both simulated ...
    assert calm["slo_met"] is True and hot["slo_met"] is False
    assert point_status(calm) == "ok"  # 200 requests support a p90; x1 is stable and within the SLO
    assert point_status(hot).startswith("overloaded @") and point_status(hot).endswith("misses SLO")
    assert "TTFT p90" in hot["slo_misses"]


def test_sweep_slo_with_an_unknown_key_is_one_line_naming_the_line(tmp_path):
    from sim.errors import ConfigError
    from sim.plan.sweep import load_sweep

    p = tmp_path / "s.yaml"
    p.write_text(f"trace: {Path(CHAT).resolve()}\nhw: h100-sxm\nslo:\n  ttft_p99: 1s\ngrid:\n  rate_scale: [1]\n")
    with pytest.raises(ConfigError) as e:
        load_sweep(p)
    assert e.value.line == 4 and e.value.field == "slo.ttft_p99"


def test_run_prints_the_verdict_under_its_table_and_in_json():
    import json
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "sim.cli", "run", CHAT, "--rate-scale", "30"],
                         capture_output=True, text=True, check=True)
    line = next(x for x in res.stdout.splitlines() if x.startswith("verdict: "))
    assert line.startswith("verdict: overloaded from t = ")
    res = subprocess.run([sys.executable, "-m", "sim.cli", "run", CHAT, "--json"], capture_output=True, text=True, check=True)
    assert json.loads(res.stdout)["verdict"]["state"] == "too_few_requests"
