"""The serving replay's front-end placement switch (calibrate/serving/replay.py FRONT_END_PLACEMENT):
"additive" replays the engine without the front-end latency and adds it to every TTFT and E2E figure
afterwards, its closed-loop throughputs shrinking by the clients' longer cycle; "in_loop" (the default)
is the simulator's FrontEnd. Branch ttft, issue 38."""

from __future__ import annotations

import math

from calibrate.serving import replay as rp
from calibrate.serving.rows import load_points
from tests.test_serving_fit import SETS, _curve


def _point():
    rows = _curve("fe", {4: {"ttft_ms|median": 20.0, "tpot_ms|median": 7.0, "output_tps|value": 400.0}})
    return load_points(rows, catalog=SETS["catalog"])[0]


def test_the_default_placement_is_the_simulators_front_end():
    assert rp.FRONT_END_PLACEMENT == "in_loop"


def test_additive_adds_the_latency_to_ttft_and_e2e_and_stretches_the_closed_loop(monkeypatch):
    p = _point()
    d = 40.0
    bare = rp.replay(p, {"request_overhead_ms": 0.0})
    monkeypatch.setattr(rp, "FRONT_END_PLACEMENT", "additive")
    add = rp.replay(p, {"request_overhead_ms": d})
    for k in bare:
        if k.startswith(("ttft_ms|", "e2el_ms|")):
            assert math.isclose(add[k], bare[k] + d), k
        elif k.startswith("tpot_ms|"):
            assert math.isclose(add[k], bare[k]), k
    f = bare["e2el_ms|mean"] / (bare["e2el_ms|mean"] + d)
    assert math.isclose(add["output_tps|value"], bare["output_tps|value"] * f)
    assert add["output_tps|value"] < bare["output_tps|value"]
    # the in-loop replay of the same latency differs (the engine sees the requests later): the switch matters
    monkeypatch.setattr(rp, "FRONT_END_PLACEMENT", "in_loop")
    inloop = rp.replay(p, {"request_overhead_ms": d})
    assert inloop["ttft_ms|median"] > bare["ttft_ms|median"]
