"""A plan's answer does not depend on the trace's length (issue 41): a short trace is extended by
resampling its own statistics, and the answer carries the uncertainty of the trace's length."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sim.plan.executors import SerialExecutor
from sim.plan.planner import SLO, Candidate, SearchSettings, run_plan
from sim.plan.workload import plan_workload, trace_stats
from workloads.trace import load_trace

CHAT = str(Path(__file__).resolve().parents[1] / "workloads/examples/chat.jsonl")
SLO_1S = SLO(ttft_p90_s=1.0)


def _same_statistics(path: Path, n: int, seed: int = 1) -> str:
    """n requests with the chat trace's lengths (pairs kept) and inter-arrival gaps, drawn by `seed`."""
    reqs = load_trace(CHAT)
    gaps = np.diff([r.arrival_s for r in reqs])
    rng = np.random.default_rng(seed)
    t = np.concatenate([[0.0], np.cumsum(rng.choice(gaps, n - 1))])
    with path.open("w") as f:
        for i, (k, a) in enumerate(zip(rng.integers(0, len(reqs), n), t)):
            f.write(json.dumps({"arrival_s": round(float(a), 6), "prompt_tokens": reqs[k].prompt_tokens,
                                "output_tokens": reqs[k].output_tokens}) + "\n")
    return str(path)


def _plan(trace: str, cache_dir: Path, **workload) -> dict:
    wl = plan_workload(trace, **workload, cache_dir=cache_dir)
    out = run_plan(trace=trace, candidates=[Candidate("h100-sxm", "vllm", "llama-3.1-8b", "bf16")], slo=SLO_1S,
                   target_rps=50.0, settings=SearchSettings(), executor=SerialExecutor(), workload=wl)
    return out


@pytest.fixture(scope="module")
def long_plan(tmp_path_factory) -> dict:
    """The plan on 5,000 requests of the chat trace's statistics (searched as recorded, no bootstrap)."""
    folder = tmp_path_factory.mktemp("long")
    return _plan(_same_statistics(folder / "chat5000.jsonl", 5000), folder, replicates=0)


def test_short_trace_is_extended_by_resampling_and_said_so(tmp_path):
    wl = plan_workload(CHAT, min_requests=2000, replicates=2, seed=0, cache_dir=tmp_path)
    assert wl.extended and wl.requests == 2000 and trace_stats(wl.path).requests == 2000
    assert "200 requests" in wl.text and "resampled from its own lengths and inter-arrival gaps" in wl.text
    src = {(r.prompt_tokens, r.output_tokens) for r in load_trace(CHAT)}
    assert {(r.prompt_tokens, r.output_tokens) for r in load_trace(wl.path)} <= src  # the trace's own requests
    again = plan_workload(CHAT, min_requests=2000, replicates=2, seed=0, cache_dir=tmp_path / "other")
    assert Path(again.path).read_bytes() == Path(wl.path).read_bytes()  # seeded: the same workload
    assert [trace_stats(p).requests for p in wl.replicates] == [2000, 2000]
    assert Path(wl.replicates[0]).read_bytes() != Path(wl.replicates[1]).read_bytes()
    long = plan_workload(CHAT, min_requests=100, replicates=0, cache_dir=tmp_path)
    assert not long.extended and long.path == CHAT and "as recorded" in long.text


def test_plan_on_200_and_5000_requests_of_the_same_statistics_agree_within_the_reported_uncertainty(tmp_path, long_plan):
    short = _plan(CHAT, tmp_path)["candidates"][0]
    long = long_plan
    c_long = long["candidates"][0]
    assert long["workload"]["searched_requests"] == 5000 and not long["workload"]["extended"]
    lo, hi = short["max_rate_interval_rps"]
    assert lo <= short["max_rate_rps"] < hi
    assert lo <= c_long["max_rate_rps"] <= hi, (short["max_rate_interval_rps"], c_long["max_rate_rps"])
    # the replicas the short trace reports cover what the long one needs
    assert short["replicas_range"][0] <= c_long["replicas"] <= short["replicas_range"][1]


def test_a_five_request_trace_gives_a_rate_of_the_same_order_with_a_wide_interval_not_87000_req_s(tmp_path, long_plan):
    five = tmp_path / "five.jsonl"
    five.write_text("".join(open(CHAT).readlines()[:5]))
    c = _plan(str(five), tmp_path)["candidates"][0]
    long = long_plan["candidates"][0]
    assert c["max_rate_rps"] is not None and c["first_failing_rate_rps"] is not None  # bracketed, not "passes at every rate"
    assert 0.3 * long["max_rate_rps"] < c["max_rate_rps"] < 3 * long["max_rate_rps"]
    lo, hi = c["max_rate_interval_rps"]
    assert (hi - lo) / c["max_rate_rps"] > 0.2  # five requests are an uncertain sample, and it says so


def test_an_overloaded_replay_fails_the_probe_even_when_its_percentiles_look_fine():
    from sim.api import make_spec, run_spec
    from sim.plan.planner import check_slo

    res = run_spec(make_spec(trace=CHAT, hw="h100-sxm", rate_scale=20.0, record_iterations=False))
    p = check_slo(res.summary, res.requests, SLO(ttft_p90_s=60.0), 20 * 0.953)
    assert p.ttft_p90_s < 60.0  # the percentile alone would pass ...
    assert not p.passed and p.verdict_state == "overloaded" and p.reason.startswith("overloaded from t = ")


def test_a_trace_past_the_bootstrap_limit_is_searched_as_recorded_without_re_searches(tmp_path, monkeypatch):
    import sim.plan.workload as workload

    monkeypatch.setattr(workload, "MAX_BOOTSTRAP_REQUESTS", 150)
    wl = plan_workload(CHAT, min_requests=100, replicates=5, cache_dir=tmp_path)
    assert wl.path == CHAT and not wl.extended and wl.replicates == ()
    assert "no bootstrap re-searches" in wl.text and not list(tmp_path.iterdir())  # nothing written
