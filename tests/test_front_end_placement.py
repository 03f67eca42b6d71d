"""The serving replay's front-end placement (calibrate/serving/replay.py `replay(..., front_end=)`):
"additive" replays the engine without the front-end latency and adds it to every TTFT and E2E figure
afterwards, its closed-loop throughputs shrinking by the clients' longer cycle; "in_loop" (the default)
is the simulator's FrontEnd. Only benchmarks/front_end_placement.py asks for "additive": an argument, so the
environment cannot switch a production replay. Branch ttft, issue 38."""

from __future__ import annotations

import math

import pytest

from calibrate.serving import replay as rp
from calibrate.serving.rows import load_points
from tests.test_serving_fit import SETS, _curve


def _point():
    rows = _curve("fe", {4: {"ttft_ms|median": 20.0, "tpot_ms|median": 7.0, "output_tps|value": 400.0}})
    return load_points(rows, catalog=SETS["catalog"])[0]


def test_the_default_placement_is_the_simulators_front_end_whatever_the_environment(monkeypatch):
    import inspect

    assert inspect.signature(rp.replay).parameters["front_end"].default == "in_loop"
    assert inspect.signature(rp.prefetch).parameters["front_end"].default == "in_loop"
    p, prm = _point(), {"request_overhead_ms": 40.0}
    inloop = rp.replay(p, prm)
    # the environment variable the diagnostic used to read changes nothing now
    monkeypatch.setenv("INFERSIM_FRONT_END_PLACEMENT", "additive")
    assert rp.replay(p, prm) == inloop
    assert rp.replay(p, prm, front_end="additive") != inloop
    with pytest.raises(ValueError, match="front_end"):
        rp.replay(p, prm, front_end="additve")


def test_additive_adds_the_latency_to_ttft_and_e2e_and_stretches_the_closed_loop():
    p = _point()
    d = 40.0
    bare = rp.replay(p, {"request_overhead_ms": 0.0})
    add = rp.replay(p, {"request_overhead_ms": d}, front_end="additive")
    for k in bare:
        if k.startswith(("ttft_ms|", "e2el_ms|")):
            assert math.isclose(add[k], bare[k] + d), k
        elif k.startswith("tpot_ms|"):
            assert math.isclose(add[k], bare[k]), k
    f = bare["e2el_ms|mean"] / (bare["e2el_ms|mean"] + d)
    assert math.isclose(add["output_tps|value"], bare["output_tps|value"] * f)
    assert add["output_tps|value"] < bare["output_tps|value"]
    # the in-loop replay of the same latency differs (the engine sees the requests later): the switch matters
    inloop = rp.replay(p, {"request_overhead_ms": d})
    assert inloop["ttft_ms|median"] > bare["ttft_ms|median"]


def test_prefetch_of_an_additive_replay_fills_the_in_loop_replay_it_reads(tmp_path):
    """prefetch(front_end="additive") replays the engine without the front end (what an additive replay reads
    from the cache); the default prefetch replays the latency in the loop."""
    p, prm = _point(), {"request_overhead_ms": 40.0}
    cache = rp.Cache(tmp_path / "c.json")
    assert rp.prefetch([(p, prm)], cache, jobs=1, front_end="additive") == 1
    assert cache.get(rp.cache_key(p, {"request_overhead_ms": 0.0})) is not None
    assert cache.get(rp.cache_key(p, prm)) is None
    assert rp.prefetch([(p, prm)], cache, jobs=1) == 1
    assert cache.get(rp.cache_key(p, prm)) is not None
    # the benchmark script asks for both placements by argument (it has no switch of its own to leave set)
    src = (rp.ROOT / "benchmarks" / "front_end_placement.py").read_text()
    assert 'front_end=mode' in src and "FRONT_END_PLACEMENT =" not in src
