"""The per-layer kernel floor per FFN kind (session 46, issue 38): EngineConfig.layer_floor_dense_us prices the
layers without routed experts, layer_floor_us the others (sim.catalog.layer_floor, sim.cost.roofline / placed),
and the serving fit refits the floor per kind (calibrate/serving/floorkind.py)."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from calibrate import serving_fit as sf
from calibrate.serving import fit as sf_fit
from calibrate.serving import replay as rp
from calibrate.serving.floorkind import kind_floor_params, kind_ships, load_record, point_kind
from calibrate.serving.floorkind_report import (
    kind_json, kind_markdown, kind_ship_rule, kind_summary_lines, preset_mismatches, recorded_ship_rule,
)
from sim.catalog.engine_config import load_engine
from sim.catalog.layer_floor import layer_floor_total_s
from sim.catalog.lookup import get_model
from sim.cost.params import CostParams
from sim.cost.roofline import CostModel
from tests.test_serving_fit import SETS, _curve

_P = CostParams(1e12, 1e15, 1e14)


# ---- the cost model --------------------------------------------------------------------------------
def test_a_hybrids_floor_sums_its_layers_by_kind_hand_computed():
    # DeepSeek-R1: 61 layers, the first 3 dense (first_k_dense_replace), 58 with routed experts.
    spec = get_model("deepseek-r1")
    assert (spec.n_layers, spec.n_routed_layers) == (61, 58)
    cm = CostModel(spec, "fp8", _P, layer_floor_s=200e-6, layer_floor_dense_s=80e-6)
    assert cm.gemm_floor_s == pytest.approx(58 * 200e-6 + 3 * 80e-6, rel=1e-12)  # 11.84 ms
    assert layer_floor_total_s(spec, 200e-6, 80e-6) == pytest.approx(0.01184, rel=1e-12)
    # Nemotron-3-Nano: 29 layers, 23 with routed experts, the other 6 mixer-only: priced at the dense floor
    nano = get_model("nemotron-3-nano-30b-a3b")
    assert layer_floor_total_s(nano, 100e-6, 50e-6) == pytest.approx(23 * 100e-6 + 6 * 50e-6, rel=1e-12)
    # a dense model has no routed layer: only the dense floor counts once set; a pure MoE only layer_floor_s
    dense, moe = get_model("llama-3.1-8b"), get_model("gpt-oss-120b")
    assert layer_floor_total_s(dense, 999e-6, 80e-6) == pytest.approx(32 * 80e-6, rel=1e-12)
    assert layer_floor_total_s(moe, 200e-6, 1.0) == pytest.approx(36 * 200e-6, rel=1e-12)


@pytest.mark.parametrize("tp", [1, 8])
def test_a_binding_floor_moves_a_step_by_each_kinds_layer_count(tp):
    # once both floors bind, each us of the dense floor adds n_dense us to a batch-1 decode step and each us of
    # the MoE floor n_routed us, on one device (roofline) and over 8 (placed)
    def step(moe_us, dense_us):
        eng = load_engine("sglang").with_overrides(tp=tp, layer_floor_us=moe_us, layer_floor_dense_us=dense_us)
        return CostModel.from_names("deepseek-r1", "fp8", "b200", eng).step_time(decode_context=[1000])

    base = step(3000.0, 3000.0)
    assert step(4000.0, 3000.0) - base == pytest.approx(58 * 1000e-6, rel=1e-9)
    assert step(3000.0, 4000.0) - base == pytest.approx(3 * 1000e-6, rel=1e-9)


@pytest.mark.parametrize("model,quant,hw,engine,tp", [
    ("llama-3.1-8b", "bf16", "h100-sxm", "vllm", 2), ("deepseek-r1", "fp8", "b200", "sglang", 8),
    ("gpt-oss-120b", "mxfp4", "h100-sxm", "vllm", 1)])
def test_no_dense_floor_keeps_the_one_floor_step_exactly(model, quant, hw, engine, tp):
    eng = load_engine(engine).with_overrides(tp=tp)
    assert eng.layer_floor_dense_us is None  # no preset sets it (the coordinator ships it after the fit)
    one = CostModel.from_names(model, quant, hw, eng)
    assert one.gemm_floor_s == eng.layer_floor_us / 1e6 * one.model.n_layers  # bit for bit the old formula
    same = CostModel.from_names(model, quant, hw, eng.with_overrides(layer_floor_dense_us=eng.layer_floor_us))
    for ctx in ([1000], [1000] * 16):
        assert same.step_time(decode_context=ctx) == pytest.approx(one.step_time(decode_context=ctx), rel=1e-12)


def test_the_replay_cache_key_is_unchanged_without_a_dense_floor_and_spells_one_out():
    rows = _curve("fk-key", {1: {"tpot_ms|median": 5.0}, 2: {"tpot_ms|median": 5.0}})
    p = sf.load_points(rows, catalog=SETS["catalog"])[0]
    assert rp.cache_key(p, {"layer_floor_us": 50.0}) == rp.cache_key(p, {"layer_floor_us": 50.0,
                                                                         "layer_floor_dense_us": None})
    assert "layer_floor_dense_us" not in rp.cache_key(p, sf_fit.fit_params({}))
    assert '"layer_floor_dense_us": 20.0' in rp.cache_key(p, {"layer_floor_dense_us": 20.0})


# ---- the fit ---------------------------------------------------------------------------------------
TRUE = {"dense": 100.0, "moe": 200.0}
FLOORS = [{}] + [{"layer_floor_us": v} for v in (50.0, 100.0, 150.0, 200.0, 300.0)]


def _kind_points(spec: list[tuple[str, str, str]]) -> list:
    """Synthetic curves (publisher, device, model) at C = 1, 4, 16 whose TPOT is met exactly at their kind's floor."""
    pts = []
    for pub, dev, model in spec:
        rows = _curve(f"fk-{pub}-{dev}-{model}", {c: {"ttft_ms|median": 50.0, "tpot_ms|median": 1.0} for c in (1, 4, 16)},
                      publisher=pub, source=f"https://example.org/{pub}", device=dev)
        pts += [dataclasses.replace(p, model=model) for p in sf.load_points(rows, catalog=SETS["catalog"])]
    for p in pts:
        p.measured[("tpot_ms", "median")] = 10.0 + 0.01 * TRUE[point_kind(p)]
    return pts


def _fake(point, params, cache=None, engine_set=None):
    """TPOT = 10 ms + 0.01 x the floor the point's layers run (a dense model's: the dense floor where set)."""
    q = params or {}
    floor = float(q.get("layer_floor_us", 0.0))
    if point_kind(point) == "dense" and q.get("layer_floor_dense_us") is not None:
        floor = float(q["layer_floor_dense_us"])
    return {"ttft_ms|median": 50.0 + float(q.get("request_overhead_ms", 0.0)), "tpot_ms|median": 10.0 + 0.01 * floor}


SPEC = [("A", "h100-sxm", "llama-3.1-8b"), ("B", "h200", "llama-3.1-8b"), ("C", "h100-sxm", "llama-3.1-70b"),
        ("D", "h200", "gpt-oss-120b"), ("E", "h100-sxm", "qwen3-30b-a3b"), ("A", "h200", "gpt-oss-120b")]


def test_the_fit_picks_the_dense_floor_from_dense_points_and_the_moe_floor_from_moe_points():
    pts = _kind_points(SPEC)
    assert {point_kind(p) for p in pts} == {"dense", "moe"}
    one = sf.fit_engine_params(pts, {"vllm": FLOORS}, _fake)["vllm"]
    assert "floor_by_kind" not in one and one["layer_floor_us"] in (100.0, 150.0, 200.0)  # one compromise floor
    got = sf.fit_engine_params(pts, {"vllm": FLOORS}, _fake, by_kind=True)["vllm"]
    assert {k: v["layer_floor_us"] for k, v in got["floor_by_kind"].items()} == TRUE
    for p in pts:  # each point replays its own kind's floor: exact
        pred = _fake(p, sf.point_params(got, p))
        assert pred["tpot_ms|median"] == pytest.approx(p.measured[("tpot_ms", "median")])


def test_held_out_by_source_each_kind_refits_without_the_source_and_a_lone_kind_source_takes_the_pooled_floor():
    pts = _kind_points(SPEC[:4])  # dense: A, B, C; MoE: D alone
    orig = sf_fit.predict
    sf_fit.predict = _fake
    try:
        preds, chosen = sf._heldout(pts, "source", {"vllm": FLOORS}, None, by_kind=True)
    finally:
        sf_fit.predict = orig
    for p in pts:
        ch = chosen[p.source]["vllm"]
        if p.source == "D":  # the only MoE source held out: no MoE point left, its floor is the pooled (dense) fit
            assert "moe" not in ch["floor_by_kind"] and ch["floor_by_kind"]["dense"]["layer_floor_us"] == 100.0
            assert preds[p.key()]["tpot_ms|median"] == pytest.approx(10.0 + 0.01 * ch["layer_floor_us"])
        else:
            assert ch["floor_by_kind"]["dense"]["layer_floor_us"] == 100.0
            assert preds[p.key()]["tpot_ms|median"] == pytest.approx(p.measured[("tpot_ms", "median")])


def test_a_hybrids_prediction_prices_each_layer_at_its_kinds_floor():
    rows = _curve("fk-hyb", {1: {"tpot_ms|median": 5.0}, 2: {"tpot_ms|median": 5.0}})
    p = sf.load_points(rows, catalog=SETS["catalog"])[0]
    by_kind = {"dense": {"layer_floor_us": 80.0}, "moe": {"layer_floor_us": 200.0}}
    hyb, dense, moe = (dataclasses.replace(p, model=m) for m in ("deepseek-r1", "llama-3.1-8b", "gpt-oss-120b"))
    assert kind_floor_params(by_kind, hyb, 150.0) == {"layer_floor_us": 200.0, "layer_floor_dense_us": 80.0}
    assert kind_floor_params(by_kind, dense, 150.0) == {"layer_floor_us": 80.0}
    assert kind_floor_params(by_kind, moe, 150.0) == {"layer_floor_us": 200.0}
    assert kind_floor_params({"dense": by_kind["dense"]}, moe, 150.0) == {"layer_floor_us": 150.0}  # pooled


def _res(pts, one_tpot, kind_tpot, one_tps, kind_tps, one_ttft, kind_ttft, kinds=("dense", "moe")):
    def recs(tpot, tps, ttft):
        return [{"point": p.key(), "metric": m, "error": e} for p in pts
                for m, e in (("tpot_itl", tpot), ("output_tps", tps), ("ttft_p50", ttft))]
    fam = {"floor_by_kind": {k: {"layer_floor_us": 100.0} for k in kinds}}
    return {"points": pts, "request_only": {"records": recs(one_tpot, one_tps, one_ttft), "final_params": {},
                                            "by_kind": {"records": recs(kind_tpot, kind_tps, kind_ttft),
                                                        "final_params": {"vllm": fam}, "chosen": {}}}}


def test_the_ship_rule_needs_a_point_on_tpot_and_throughput_and_at_most_a_point_on_ttft():
    pts = _kind_points(SPEC)
    assert kind_ship_rule(_res(pts, 0.20, 0.19, 0.15, 0.14, 0.30, 0.31))["vllm"]["ship"]  # -1, -1, +1: ships
    assert not kind_ship_rule(_res(pts, 0.20, 0.195, 0.15, 0.10, 0.30, 0.30))["vllm"]["ship"]  # TPOT -0.5 only
    assert not kind_ship_rule(_res(pts, 0.20, 0.10, 0.15, 0.145, 0.30, 0.30))["vllm"]["ship"]  # throughput -0.5
    assert not kind_ship_rule(_res(pts, 0.20, 0.10, 0.15, 0.10, 0.30, 0.315))["vllm"]["ship"]  # TTFT +1.5
    assert not kind_ship_rule(_res(pts, 0.20, 0.10, 0.15, 0.10, 0.30, 0.30, kinds=("dense",)))["vllm"]["ship"]


def _report_by_kind() -> dict | None:
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "serving_fidelity.json"
    return (json.loads(path.read_text()).get("layer_floor") or {}).get("by_kind")


def test_no_preset_splits_the_floor_by_kind_unless_the_serving_fit_ships_it():
    """A family's preset sets layer_floor_dense_us only where the floor-per-kind ship rule (calibrate/serving/
    floorkind.py, held out by source) says ship, and then to the all-rows dense value: the rule as the committed
    report ran it (benchmarks/serving_fit.py --floor-kind) where its section is fresh, else as applied to the
    recorded full fit (benchmarks/serving/floorkind_rule.json)."""
    by_kind = _report_by_kind()
    fresh = bool(by_kind and by_kind.get("ship_rule") and not by_kind.get("recorded_from"))
    table = by_kind["ship_rule"] if fresh else recorded_ship_rule()
    assert table
    assert preset_mismatches(table, lambda fam: load_engine(fam).layer_floor_dense_us) == []


def test_a_preset_splitting_the_floor_against_a_no_ship_record_fails():
    rec = load_record()
    table = recorded_ship_rule(rec)
    assert set(table) == set(rec["decides"]["presets"]) and not any(v["ship"] for v in table.values())
    got = preset_mismatches(table, lambda fam: 150.0 if fam == "vllm" else None)
    assert got == ["vllm: preset layer_floor_dense_us 150.0, the rule gives None"]
    # the verdict is the rule applied to the figures: with 2 points gained on TPOT/ITL and throughput vLLM ships,
    # and then a preset without the dense floor is the mismatch
    better = copy.deepcopy(rec)
    v = better["families"]["vllm"]
    v["by_kind"] = {**v["one_floor"], "tpot_itl": v["one_floor"]["tpot_itl"] - 2.0,
                    "output_tps": v["one_floor"]["output_tps"] - 2.0}
    t2 = recorded_ship_rule(better)
    assert t2["vllm"]["ship"] and not t2["sglang"]["ship"]
    dense = v["values"]["dense"]["layer_floor_us"]
    assert preset_mismatches(t2, lambda fam: None) == [f"vllm: preset layer_floor_dense_us None, the rule gives {dense}"]
    assert preset_mismatches(t2, lambda fam: dense if fam == "vllm" else None) == []


def test_the_recorded_verdicts_are_what_the_rule_gives_on_the_recorded_figures():
    rec = load_record()
    for fam, v in recorded_ship_rule(rec).items():
        assert ("ship" if v["ship"] else "no") == rec["families"][fam]["verdict_recorded"], fam
        assert kind_ships(v["one_floor"], v["by_kind"], v["values"]) == v["ship"]


def test_a_fit_without_the_stage_reports_the_record_labelled_and_a_fit_with_it_the_fresh_figures():
    res = {"points": [], "request_only": {"records": [], "final_params": {}}}  # no "by_kind": the stage not run
    rec = load_record()
    kj = kind_json(res)
    label = f"recorded from {rec['date']} full fit; rerun with --floor-kind"
    assert kj["recorded_from"]["label"] == label and kj["ship_rule"] == recorded_ship_rule(rec)
    assert kj["folds"] == rec["folds"]
    md = "\n".join(kind_markdown(kj))
    assert label in md and rec["command"] in md and rec["rerun"] in md
    assert "| vllm | dense 150 us (family), moe 200 us (family) | 200 | " in md
    lines = kind_summary_lines(res)
    assert len(lines) == len(rec["families"]) and all(label in line for line in lines)
    fresh = _res(_kind_points(SPEC), 0.20, 0.19, 0.15, 0.14, 0.30, 0.31)
    kf = kind_json(fresh)
    assert "recorded_from" not in kf and set(kf) == {"min_gain_pts", "max_ttft_loss_pts", "ship_rule", "chosen"}
    assert kf["ship_rule"]["vllm"]["ship"] and "recorded" not in "\n".join(kind_markdown(kf) + kind_summary_lines(fresh))


def test_the_committed_reports_recorded_section_is_the_record():
    by_kind = _report_by_kind()
    if not (by_kind and by_kind.get("recorded_from")):
        pytest.skip("the committed report ran the stage (or predates it): its section is fresh")
    assert by_kind["ship_rule"] == recorded_ship_rule()


def test_serving_fit_runs_the_stage_only_with_floor_kind(monkeypatch):
    from tests.serving_cli import Stop, stubbed_cli

    cli, seen = stubbed_cli(monkeypatch)
    for argv in (["--curves", "x"], ["--curves", "x", "--floor-kind"]):
        with pytest.raises(Stop):
            cli.main(argv)
    assert [kw["floor_kind"] for kw in seen] == [False, True]
