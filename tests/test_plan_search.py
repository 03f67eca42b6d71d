"""The rate search (bracket + bisection), SLO parsing and the Pareto front, on synthetic probes."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import ConfigError
from sim.plan.planner import SLO, Probe, SearchSettings, check_slo, find_max_rate, parse_duration, rank
from sim.plan.report import pareto_front


@pytest.mark.parametrize(("text", "seconds"), [("2s", 2.0), ("100ms", 0.1), ("1.5", 1.5), ("250us", 250e-6),
                                               (" 0.5 s ", 0.5), ("1e-1", 0.1)])
def test_durations_accept_seconds_milliseconds_and_bare_numbers(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "fast", "2 minutes", "-1s", "0ms", "1.2.3"])
def test_bad_durations_are_config_errors_naming_the_option(text):
    with pytest.raises(ConfigError) as info:
        parse_duration(text, field="--ttft-p90")
    assert info.value.field == "--ttft-p90"


def _threshold_probe(capacity: float, calls: list[float] | None = None):
    """A replica whose SLO holds exactly up to `capacity` req/s (its TTFT p90 grows with the rate)."""
    def probe(rate: float) -> Probe:
        if calls is not None:
            calls.append(rate)
        return Probe(rate, rate <= capacity, "" if rate <= capacity else "TTFT p90 too high",
                     ttft_p90_s=0.1 + rate, tpot_p90_s=0.02, goodput_fraction=1.0)
    return probe


@settings(deadline=None, max_examples=60)
@given(capacity=st.floats(1e-3, 1e4), start=st.floats(1e-2, 1e3), tol=st.sampled_from([0.01, 0.02, 0.05]))
def test_search_brackets_the_capacity_within_the_tolerance(capacity, start, tol):
    res = find_max_rate(_threshold_probe(capacity), start, SearchSettings(rel_tol=tol, max_iterations=60,
                                                                        max_bracket_steps=40))
    assert res.last_pass.passed and not res.first_fail.passed
    assert res.last_pass.rate_rps <= capacity < res.first_fail.rate_rps
    assert (res.first_fail.rate_rps - res.last_pass.rate_rps) / res.first_fail.rate_rps <= tol
    # every probe below the answer passed and every probe above failed: the pair is consistent
    assert all(p.passed == (p.rate_rps <= capacity) for p in res.probes)


def test_search_stops_after_max_iterations_and_still_reports_a_verified_pair():
    calls: list[float] = []
    res = find_max_rate(_threshold_probe(3.3, calls), 1.0, SearchSettings(rel_tol=1e-9, max_iterations=3))
    # bracket: 1 pass, 2 pass, 4 fail; then exactly 3 midpoints
    assert calls[:3] == [1.0, 2.0, 4.0] and len(calls) == 6 and res.iterations == 3
    assert res.last_pass.rate_rps <= 3.3 < res.first_fail.rate_rps


def test_candidate_failing_at_every_rate_is_infeasible_with_its_reason():
    res = find_max_rate(_threshold_probe(0.0), 1.0, SearchSettings(max_bracket_steps=4))
    assert res.max_rate_rps is None and res.first_fail.rate_rps == pytest.approx(1 / 16)
    assert "infeasible" in res.note and "TTFT" in res.note


def test_rejected_requests_end_the_search_at_once():
    calls: list[float] = []

    def probe(rate):
        calls.append(rate)
        return Probe(rate, False, "3 requests rejected", rejected=3)

    res = find_max_rate(probe, 2.0)
    assert calls == [2.0] and res.max_rate_rps is None and "rejected" in res.note


def _summary(ttft_p90, tpot_p90, rejected=0):
    return {"ttft_s": {"p90": ttft_p90}, "tpot_s": {"p90": tpot_p90}, "requests": {"rejected": rejected},
            "throughput": {"output_tok_s": 100.0}}


def test_slo_check_applies_only_the_slos_given_and_computes_goodput_per_request():
    reqs = pd.DataFrame({"status": ["completed"] * 4 + ["rejected"],
                         "ttft_s": [0.1, 0.2, 0.3, 3.0, float("nan")],
                         "tpot_s": [0.01, 0.2, float("nan"), 0.01, float("nan")],
                         # the columns the verdict reads (issue 41); a calm replay, not an overload
                         "arrival_s": [0.0, 1.0, 2.0, 3.0, 4.0], "finish_s": [0.5, 1.5, 2.5, 6.5, 4.0],
                         "e2e_s": [0.5, 0.5, 0.5, 3.5, float("nan")]})
    slo = SLO(ttft_p90_s=1.0, tpot_p90_s=0.05)
    # meets both: rows 0 and 2 (one-token output: no TPOT) -> 2 of 5 requests
    p = check_slo(_summary(0.5, 0.04), reqs, slo, 1.0)
    assert p.goodput_fraction == pytest.approx(0.4)
    assert p.passed
    assert not check_slo(_summary(1.5, 0.04), reqs, slo, 1.0).passed
    assert not check_slo(_summary(0.5, 0.06), reqs, slo, 1.0).passed
    # TTFT-only goodput: rows 0, 1, 2 -> 3 of 5
    ttft_only = check_slo(_summary(0.5, 0.04), reqs, SLO(ttft_p90_s=1.0, goodput=0.6), 1.0)
    assert ttft_only.goodput_fraction == pytest.approx(0.6) and ttft_only.passed
    assert not check_slo(_summary(0.5, 0.04), reqs, SLO(ttft_p90_s=1.0, goodput=0.7), 1.0).passed
    assert not check_slo(_summary(0.5, 0.04, rejected=1), reqs, slo, 1.0).passed
    assert check_slo(_summary(0.5, 9.0), reqs, SLO(ttft_p90_s=1.0), 1.0).passed  # no TPOT SLO given


def test_slo_needs_a_latency_objective():
    with pytest.raises(ConfigError):
        SLO(goodput=0.9)
    with pytest.raises(ConfigError):
        SLO(ttft_p90_s=1.0, goodput=1.5)


def test_ranking_puts_feasible_cheapest_first_and_unknown_prices_last():
    cands = [
        {"hw": "a", "feasible": True, "replicas": 2, "max_rate_rps": 5, "cost_per_million_output_tokens": {"rental": 3.0, "ownership": 1.0}},
        {"hw": "b", "feasible": False, "replicas": None, "max_rate_rps": None, "cost_per_million_output_tokens": {"rental": None, "ownership": None}},
        {"hw": "c", "feasible": True, "replicas": 4, "max_rate_rps": 2, "cost_per_million_output_tokens": {"rental": None, "ownership": 0.5}},
        {"hw": "d", "feasible": True, "replicas": 1, "max_rate_rps": 9, "cost_per_million_output_tokens": {"rental": 2.0, "ownership": 2.0}},
    ]
    assert [c["hw"] for c in rank(cands, "rental")] == ["d", "a", "c", "b"]
    assert [c["hw"] for c in rank(cands, "ownership")] == ["c", "a", "d", "b"]


def test_pareto_front_keeps_only_points_no_other_point_beats_on_both_axes():
    df = pd.DataFrame({"cost": [1, 2, 3, 2, 5, 4], "lat": [9, 5, 6, 7, 1, 1]})
    front = pareto_front(df, "cost", "lat")
    assert list(zip(front["cost"], front["lat"])) == [(1, 9), (2, 5), (4, 1)]


def test_halving_stops_once_lower_load_no_longer_changes_the_latencies():
    calls: list[float] = []

    def probe(rate):  # queueing vanishes below 1 req/s; the light-load TTFT (3 s) misses the SLO
        calls.append(rate)
        return Probe(rate, False, "TTFT p90 too high", ttft_p90_s=3.0 + max(0.0, rate - 1.0), tpot_p90_s=0.05,
                     goodput_fraction=0.0)

    res = find_max_rate(probe, 8.0)
    assert calls == [8.0, 4.0, 2.0, 1.0, 0.5]
    assert res.max_rate_rps is None and "infeasible" in res.note
