"""tp_step_overhead_ms: a multi-process executor's per-step host round trip at tp x pp > 1 (sim.cost.parallel),
and its held-out fit and ship rule (calibrate/serving/tpstep.py)."""

import pytest

from calibrate.serving import tpstep
from calibrate.serving.rows import LoadPoint
from sim.catalog.engine_config import load_engine
from sim.cost.parallel import ParallelConfig
from sim.cost.roofline import CostModel
from sim.errors import ConfigError


def _cm(tp: int, step_ms: float) -> CostModel:
    eng = load_engine("vllm").model_copy(update={"tp": tp, "tp_step_overhead_ms": step_ms})
    return CostModel.from_names("llama-3.3-70b", "fp8", "h200", eng)


def test_the_step_is_charged_once_per_iteration_on_a_tp_group_only():
    for ctx in ([1100], [1100] * 64):
        assert _cm(4, 1.0).step_time((), (), ctx) - _cm(4, 0.0).step_time((), (), ctx) == pytest.approx(1e-3)
        assert _cm(1, 1.0).step_time((), (), ctx) == _cm(1, 0.0).step_time((), (), ctx)  # UniProcExecutor: none
    # a prefill step pays it too (the round trip is per step, whatever the step holds)
    assert (_cm(4, 0.5).step_time((2048,), (0,), [1100] * 8) - _cm(4, 0.0).step_time((2048,), (0,), [1100] * 8)
            == pytest.approx(0.5e-3))
    # the decode-run closed form sums the same per-step figures
    cm = _cm(4, 1.0)
    steps = [cm.step_time((), (), (3000 + i, 700 + i)) for i in range(30)]
    assert cm.decode_run_time([3000, 700], 30) == pytest.approx(sum(steps), rel=1e-9)


def test_preset_ships_it_off_and_bad_values_are_refused():
    assert load_engine("vllm").tp_step_overhead_ms == 0.0
    assert load_engine("vllm@0.10").tp_step_overhead_ms == 0.0
    with pytest.raises(ConfigError):
        ParallelConfig(tp=2, interconnect_bandwidth_bytes_per_s=1e11, executor_step_s=-1e-3)
    with pytest.raises(Exception):  # pydantic: ge=0
        load_engine("vllm").model_validate({**load_engine("vllm").model_dump(), "tp_step_overhead_ms": -1})


def _point(source: str, tp: int, family: str = "vllm", anomaly: str = "", experimental: bool = False) -> LoadPoint:
    return LoadPoint(curve_id=f"{source}-{tp}", source=source, device="h200", engine="vllm@0.10", family=family,
                     model="llama-3.3-70b", quant="fp8", tp=tp, kv_dtype=None, overrides={}, load_kind="concurrency",
                     load=1.0, num_prompts=10, replayed_prompts=10, prompt_lens=[100], output_lens=[10],
                     release_s=[0.0], max_concurrency=1, experimental=experimental, build_anomaly=anomaly)


def test_fit_points_are_the_trained_vllm_points_with_tp_above_one():
    ps = [_point("a", 4), _point("a", 1), _point("b", 8, family="sglang"), _point("c", 4, anomaly="slow build"),
          _point("d", 8, experimental=True), _point("e", 2)]
    assert [p.source for p in tpstep.fit_points(ps)] == ["a", "e"]


def test_fit_value_takes_the_smallest_loss_and_ties_go_to_the_smaller_value():
    ps = [_point("a", 4)]

    def recs_of(p, params):
        return [{"v": params.get("tp_step_overhead_ms", 0.0)}]

    def loss_at(target):
        return lambda recs: abs(recs[0]["v"] - target)

    assert tpstep.fit_value(ps, lambda p: {"layer_floor_us": 50.0}, recs_of, loss_at(0.9))[0] == 1.0
    assert tpstep.fit_value(ps, lambda p: {}, recs_of, lambda recs: 1.0)[0] == 0.0  # flat: the smallest
    assert tpstep.fit_value([], lambda p: {}, recs_of, loss_at(1.0)) == (0.0, {})
    assert tpstep.params_with({"layer_floor_us": 50.0}, 0.0) == {"layer_floor_us": 50.0}  # the same replay key
    assert tpstep.params_with({}, 0.5) == {"tp_step_overhead_ms": 0.5}


def test_ship_rule():
    def figs(tpot, out, ttft):
        return {"tpot_itl": {"median_abs_pct": tpot}, "output_tps": {"median_abs_pct": out},
                "ttft_p50": {"median_abs_pct": ttft}}

    before = figs(33.5, 48.9, 57.3)
    assert tpstep.ships(before, figs(30.0, 48.9, 57.3), 1.0)
    assert not tpstep.ships(before, figs(30.0, 48.9, 57.3), 0.0)  # the all-sources value must be > 0
    assert not tpstep.ships(before, figs(33.5, 40.0, 50.0), 1.0)  # TPOT/ITL must improve
    assert not tpstep.ships(before, figs(30.0, 49.0, 57.3), 1.0)  # throughput no worse
    assert not tpstep.ships(before, figs(30.0, 48.9, 60.0), 1.0)  # TTFT p50 no worse


def test_cli_without_a_vllm_curve_is_a_one_line_error(capsys):
    assert tpstep.main(["--curves", "no-such-curve-id-anywhere"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tpstep: error:")
