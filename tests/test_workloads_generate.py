"""`workloads.generate`: statistical properties of the arrival processes and lengths, sessions,
closed loop, determinism."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import ConfigError
from workloads.generate import build_spec, generate, parse_dist
from workloads.stats import TraceColumns, trace_stats
from workloads.trace import write_trace

DATA = Path(__file__).parent / "data"


def _times(reqs) -> np.ndarray:
    return np.array([r.arrival_s for r in reqs])


def _cv(t: np.ndarray) -> float:
    g = np.diff(t)
    return float(g.std() / g.mean())


def test_poisson_arrivals_have_the_rate_and_cv_one():
    reqs = generate(build_spec({"requests": 20_000, "arrival": {"rate_per_s": 4.0}, "seed": 7}))
    t = _times(reqs)
    # 20k exponential gaps: the mean rate is within ~1% (1 sigma = 0.7%), the CV within ~2%
    assert len(t) / t[-1] == pytest.approx(4.0, rel=0.03)
    assert _cv(t) == pytest.approx(1.0, abs=0.04)
    assert t[0] == 0.0


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_arrivals_have_cv_one_over_sqrt_burstiness(burstiness):
    reqs = generate(build_spec({"requests": 20_000, "arrival": {"process": "gamma", "rate_per_s": 2.0,
                                                                "burstiness": burstiness}, "seed": 3}))
    t = _times(reqs)
    assert len(t) / t[-1] == pytest.approx(2.0, rel=0.05)
    assert _cv(t) == pytest.approx(1 / math.sqrt(burstiness), rel=0.06)


def test_constant_rate_has_equal_gaps():
    t = _times(generate(build_spec({"requests": 50, "arrival": {"process": "constant", "rate_per_s": 5.0}})))
    assert np.allclose(np.diff(t), 0.2)


def test_duration_bounds_the_trace_and_fixes_the_expected_count():
    reqs = generate(build_spec({"duration_s": 1000, "arrival": {"rate_per_s": 3.0}, "seed": 1}))
    t = _times(reqs)
    assert t[-1] < 1000
    assert len(t) == pytest.approx(3000, abs=4 * math.sqrt(3000))  # Poisson count: sd = sqrt(3000)


def test_schedule_rates_hold_piece_by_piece_and_zero_means_silence():
    spec = {"duration_s": 600, "seed": 2, "arrival": {"schedule": [
        {"start_s": 0, "rate_per_s": 0}, {"start_s": 100, "rate_per_s": 10}, {"start_s": 300, "rate_per_s": 1}]}}
    t = _times(generate(build_spec(spec)))
    assert t.min() >= 100  # nothing while the rate is 0
    n_fast = ((t >= 100) & (t < 300)).sum()
    n_slow = (t >= 300).sum()
    assert n_fast == pytest.approx(2000, abs=4 * math.sqrt(2000))
    assert n_slow == pytest.approx(300, abs=4 * math.sqrt(300))


def test_daily_curve_peaks_where_asked():
    spec = {"duration_s": 1200, "seed": 4, "arrival": {"daily": {
        "low_rate_per_s": 0.5, "high_rate_per_s": 10, "peak_s": 300, "period_s": 1200}}}
    t = _times(generate(build_spec(spec)))
    counts, _ = np.histogram(t, bins=12, range=(0, 1200))
    assert int(np.argmax(counts)) in (2, 3)  # the 100-s bins around t = 300
    assert counts[8] < counts[2] / 4  # trough at t = 900
    # expected total = integral of the curve = (low + high) / 2 * period = 6300
    assert len(t) == pytest.approx(6300, abs=4 * math.sqrt(6300))


def test_rate_inf_puts_every_request_at_zero():
    reqs = generate(build_spec({"requests": 10, "arrival": {"rate_per_s": math.inf}}))
    assert {r.arrival_s for r in reqs} == {0.0}


@pytest.mark.parametrize("text, mean", [
    ("fixed:300", 300), ("300", 300), ("uniform:100,500", 300), ("normal:300,30", 300),
    ("lognormal:300,200", 300), ("exponential:300", 300),
])
def test_length_distributions_have_their_mean(text, mean):
    spec = {"requests": 20_000, "arrival": {"rate_per_s": 1}, "prompt": parse_dist(text, option="p").model_dump(),
            "seed": 5}
    p = np.array([r.prompt_tokens for r in generate(build_spec(spec))])
    assert p.mean() == pytest.approx(mean, rel=0.03)
    assert p.min() >= 1


def test_lognormal_std_matches_the_spec():
    spec = {"requests": 50_000, "arrival": {"rate_per_s": 1}, "output": {"dist": "lognormal", "mean": 200, "std": 150}}
    o = np.array([r.output_tokens for r in generate(build_spec(spec))])
    assert o.std() == pytest.approx(150, rel=0.06)


def test_clamps_bound_prompt_output_and_budget():
    spec = {"requests": 2000, "arrival": {"rate_per_s": 1}, "prompt": {"dist": "lognormal", "mean": 3000, "std": 3000},
            "output": {"dist": "lognormal", "mean": 500, "std": 500}, "max_prompt_tokens": 4096,
            "max_output_tokens": 700, "max_tokens": 600, "system_prompt_tokens": 96}
    reqs = generate(build_spec(spec))
    assert max(r.prompt_tokens for r in reqs) == 4096  # the cap covers the system prompt too
    assert max(r.output_tokens for r in reqs) == 600
    assert {r.max_tokens for r in reqs} == {600}
    assert {(r.prefix_id, r.prefix_tokens) for r in reqs} == {("system", 96)}


def test_empirical_lengths_are_drawn_as_whole_rows_of_the_source():
    rows = set()
    for line in (DATA / "azure_conv_excerpt.csv").read_text().splitlines()[1:]:
        _, c, g = line.split(",")
        rows.add((int(c), int(g)))
    reqs = generate(build_spec({"requests": 300, "arrival": {"rate_per_s": 1},
                                "lengths_from": str(DATA / "azure_conv_excerpt.csv")}))
    pairs = {(r.prompt_tokens, r.output_tokens) for r in reqs}
    assert pairs <= rows  # prompt and output drawn jointly: every pair is a real row
    assert len(pairs) > 20


def test_sessions_carry_the_conversation_as_a_growing_prefix():
    spec = {"requests": 400, "arrival": {"rate_per_s": 0.5}, "seed": 9,
            "sessions": {"turns": {"dist": "fixed", "value": 3}, "think_s": {"dist": "fixed", "value": 10}},
            "prompt": {"dist": "fixed", "value": 100}, "output": {"dist": "fixed", "value": 50}}
    reqs = generate(build_spec(spec))
    by_session: dict[str, list] = {}
    for r in reqs:
        by_session.setdefault(r.session_id, []).append(r)
    complete = [v for v in by_session.values() if len(v) == 3]
    assert len(complete) > 50
    for turns in complete:
        # turn k = previous prompt + previous answer + a new 100-token message
        assert [r.prompt_tokens for r in turns] == [100, 250, 400]
        assert all(r.prefix_id == turns[0].session_id and r.prefix_tokens == r.prompt_tokens for r in turns)
        assert [r.think_s for r in turns] == [None, 10.0, 10.0]
        assert np.allclose(np.diff([r.arrival_s for r in turns]), 10.0)
    st_ = trace_stats(TraceColumns.collect(reqs))
    assert st_.prefix_reuse > 0.3


def test_closed_loop_clients_chain_requests_with_think_time():
    spec = {"requests": 40, "arrival": {"process": "closed", "clients": 4, "think_s": {"dist": "fixed", "value": 5},
                                        "ramp_s": 2}}
    reqs = generate(build_spec(spec))
    assert len(reqs) == 40
    clients: dict[str, list] = {}
    for r in reqs:
        clients.setdefault(r.session_id, []).append(r)
    assert sorted(clients) == ["c0", "c1", "c2", "c3"]
    for i, (name, rs) in enumerate(sorted(clients.items())):
        assert len(rs) == 10
        assert rs[0].think_s is None and rs[0].arrival_s == pytest.approx(2 * i / 4)
        assert all(r.think_s == 5.0 for r in rs[1:])
        assert all(r.prefix_id is None for r in rs)


def test_closed_loop_with_sessions_names_conversations_as_prefixes():
    spec = {"requests": 24, "arrival": {"process": "closed", "clients": 2, "think_s": {"dist": "fixed", "value": 1}},
            "sessions": {"turns": {"dist": "fixed", "value": 3}}}
    reqs = generate(build_spec(spec))
    c0 = [r for r in reqs if r.session_id == "c0"]
    assert [r.prefix_id for r in c0] == ["c0.0"] * 3 + ["c0.1"] * 3 + ["c0.2"] * 3 + ["c0.3"] * 3
    assert [r.think_s for r in c0] == [None] + [1.0] * 11


def test_same_seed_gives_a_byte_identical_file_and_another_seed_does_not(tmp_path):
    spec = {"requests": 500, "arrival": {"process": "gamma", "rate_per_s": 3, "burstiness": 0.5},
            "sessions": {"turns": {"dist": "uniform", "low": 1, "high": 5}}, "seed": 11}
    paths = []
    for i, seed in enumerate((11, 11, 12)):
        p = tmp_path / f"{i}.jsonl"
        write_trace(generate(build_spec({**spec, "seed": seed})), p)
        paths.append(p.read_bytes())
    assert paths[0] == paths[1]
    assert paths[0] != paths[2]


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 300), st.sampled_from(["poisson", "gamma", "constant"]), st.floats(0.01, 50),
       st.integers(0, 2**31), st.booleans())
def test_generated_traces_are_sorted_valid_and_sized(n, process, rate, seed, sessions):
    spec = {"requests": n, "arrival": {"process": process, "rate_per_s": rate, "burstiness": 0.3}, "seed": seed}
    if sessions:
        spec["sessions"] = {"turns": {"dist": "uniform", "low": 1, "high": 4}}
    reqs = generate(build_spec(spec))
    assert len(reqs) == n
    t = _times(reqs)
    assert (np.diff(t) >= 0).all() and t[0] >= 0
    assert all(r.prompt_tokens >= 1 and r.output_tokens >= 1 and r.prefix_tokens <= r.prompt_tokens for r in reqs)


@pytest.mark.parametrize("spec, message", [
    ({"arrival": {"rate_per_s": 1}}, "give requests or duration_s"),
    ({"requests": 5, "arrival": {"rate_per_s": 1, "daily": {"low_rate_per_s": 0, "high_rate_per_s": 1}}},
     "give exactly one of rate_per_s, schedule, daily (got rate_per_s, daily)"),
    ({"requests": 5, "arrival": {"process": "closed"}}, "process closed needs clients"),
    ({"requests": 5, "arrival": {"rate_per_s": 1}, "prompt": {"dist": "uniform", "low": 5, "high": 1}},
     "high (1.0) is below low (5.0)"),
    ({"requests": 5, "arrival": {"rate_per_s": 1}, "prompt": {"dist": "zipf", "a": 2}}, "prompt"),
])
def test_bad_specs_are_config_errors(spec, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_spec(spec)


@pytest.mark.parametrize("text, problem", [
    ("zipf:2", "unknown distribution 'zipf'"),
    ("uniform:1", "uniform takes 2 number(s): uniform:low,high"),
    ("normal:a,b", "not a number in 'normal:a,b'"),
])
def test_bad_distribution_strings_name_the_option(text, problem):
    with pytest.raises(ConfigError) as exc:
        parse_dist(text, option="--prompt-tokens")
    assert exc.value.field == "--prompt-tokens"
    assert exc.value.problem.startswith(problem)


def test_example_spec_file_generates_a_day_peaking_at_nine():
    from workloads.generate import load_spec

    spec_path = Path(__file__).resolve().parents[1] / "workloads" / "examples" / "office-day.yaml"
    reqs = generate(build_spec(load_spec(spec_path), file=spec_path))
    t = _times(reqs)
    hourly, _ = np.histogram(t, bins=24, range=(0, 86400))
    assert 7 <= int(np.argmax(hourly)) <= 11
    assert max(r.prompt_tokens for r in reqs) <= 8192
    assert all(r.prefix_tokens <= r.prompt_tokens for r in reqs)
