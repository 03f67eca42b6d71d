"""Stage 2 of the serving fit, the TTFT rows the front-end latency is fitted on (calibrate/serving/front_end.py):
the "prefill_light" rule keeps a row only where the simulated prefill + queue is a small share of the measured
TTFT, falls back to the unloaded points (a family) or the family's value (a release) with too few such rows,
and the nested leave-one-source-out choice can pick it."""

from __future__ import annotations

import pytest

from calibrate.serving import front_end as fe


def _rec(src: str, curve: str, load: float, predicted: float, measured: float, *, engine: str = "vllm@0.11",
         metric: str = "ttft_p50", quantity: str = "ttft_ms") -> dict:
    return {"curve_id": curve, "source": src, "engine": engine, "load": load, "metric": metric,
            "quantity": quantity, "predicted": predicted, "measured": measured}


def test_prefill_light_keeps_rows_whose_simulated_prefill_and_queue_is_a_small_share_of_the_ttft():
    light = _rec("A", "a", 1, 30.0, 100.0)  # 30% of the measured TTFT simulated: the rest is the front end
    edge = _rec("A", "a", 2, 50.0, 100.0)  # exactly the share: kept
    heavy = _rec("A", "a", 8, 80.0, 100.0)  # 80% simulated: a prefill / queue miss would move the front end
    p99 = _rec("A", "a", 1, 20.0, 100.0, metric="ttft_p99")
    tpot = _rec("A", "a", 1, 5.0, 100.0, metric="tpot_itl", quantity="tpot_ms")  # not a TTFT row
    assert fe.PREFILL_LIGHT_SHARE == 0.5  # the committed constant (module docstring)
    assert fe.prefill_light_records([light, edge, heavy, p99, tpot]) == [light, edge, p99]


def test_a_family_with_too_few_prefill_light_rows_fits_on_its_unloaded_points():
    # two light rows (< MIN_PREFILL_LIGHT_ROWS) whose front end is 60 ms; the curves' lowest load points say 20
    recs = [_rec("A", "a", 1, 100.0, 120.0), _rec("B", "b", 1, 100.0, 120.0),
            _rec("A", "a", 8, 30.0, 90.0), _rec("B", "b", 8, 30.0, 90.0)]
    assert len(fe.prefill_light_records(recs)) < fe.MIN_PREFILL_LIGHT_ROWS
    assert fe.front_end_values(recs, "prefill_light") == fe.front_end_values(recs, "unloaded") == (20.0, {"vllm@0.11": 20.0})
    more = recs + [_rec("C", "c", 8, 30.0, 90.0)]  # a third light row: the rule fits on the light rows
    assert fe.front_end_values(more, "prefill_light")[0] == 60.0


def test_a_release_with_too_few_prefill_light_rows_takes_its_familys_value():
    own = [_rec(s, s, l, 20.0, 60.0, engine="vllm@0.11") for s in ("A", "B") for l in (1, 8)]  # 4 rows, 40 ms
    few = [_rec(s, s + "x", 1, 20.0, 70.0, engine="vllm@0.10") for s in ("A", "B")]  # 2 rows from 2 sources
    fam, rel = fe.front_end_values(own + few, "prefill_light")
    assert rel == {"vllm@0.11": 40.0} and fam == 40.0  # 0.10 (two rows) takes the family's value
    assert fe.front_end_values(own + few, "all_loads")[1]["vllm@0.10"] == 50.0  # the other rules need no row count


def test_the_nested_choice_picks_prefill_light_when_the_sources_prefill_misses_differ():
    """Every source's light curve says 40 ms; its long-prompt curve's simulated prefill is off by a factor of
    its own (1.6, 1.0, 1.5, 0.8), which the other rules fold into the front end of the other sources."""
    recs = []
    for s, k in (("A", 1.6), ("B", 1.0), ("C", 1.5), ("D", 0.8)):
        for load in (1, 8):
            recs.append(_rec(s, s + "-short", load, 30.0, 70.0))
            recs += [_rec(s, f"{s}-long{i}", load, 300.0, 300.0 * k + 40.0) for i in range(2)]
    rule, losses = fe.choose_front_end_rule(recs, recs)
    assert rule == "prefill_light"
    assert losses["prefill_light"] < min(losses["all_loads"], losses["unloaded"])
    assert fe.FRONT_END_RULES[:2] == ("all_loads", "unloaded")  # ties still go to the earlier rules


def test_an_unknown_rule_is_an_error_naming_the_rules():
    with pytest.raises(ValueError, match="prefill_light"):
        fe.front_end_values([_rec("A", "a", 1, 30.0, 70.0)], "light")
