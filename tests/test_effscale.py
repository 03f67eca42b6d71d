"""The bandwidth efficiency scale per (engine family, device group) (calibrate/serving/effscale.py): the engine's
`efficiency_scale` multiplies a kernel family's fitted efficiencies, the replay cache keys on the effective
scale, and the fit, its held-out folds and its ship rule on synthetic rows (issue 38 item 4)."""

from __future__ import annotations

import pytest

from calibrate import serving_fit as sf
from calibrate.serving import effscale as es
from calibrate.serving import fit as sf_fit
from calibrate.serving import replay as rp
from sim.catalog.engine_config import EngineConfig, load_engine
from sim.catalog.hardware import load_profile
from sim.cost.params import CostParams
from tests.test_serving_fit import SETS, _curve

#: true bandwidth scale per vendor: the fake prediction reproduces a row's TPOT exactly at it
TRUE = {"NVIDIA": 1.0, "AMD": 0.7, "Apple": 0.9}
SPEC = [("A", "h100-sxm"), ("B", "h200"), ("C", "mi300x"), ("D", "mi355x"), ("E", "apple-m4-max")]


def _points():
    pts = []
    for pub, dev in SPEC:
        rows = _curve(f"es-{pub}-{dev}", {c: {"tpot_ms|median": 1.0} for c in (1, 4, 16)},
                      publisher=pub, source=f"https://example.org/{pub}", device=dev)
        pts += sf.load_points(rows, catalog=SETS["catalog"])
    for p in pts:
        p.measured[("tpot_ms", "median")] = 10.0 / TRUE[sf_fit.floor_group(p)]
    return pts


def _fake(point, params, cache=None):
    sc = ((params or {}).get("efficiency_scale") or {}).get("bandwidth", 1.0)
    return {"tpot_ms|median": 10.0 / sc}


def _loss(recs):
    return sf_fit._loss(recs, sf_fit.STEP_METRICS)


def test_the_engine_scale_multiplies_a_kernel_familys_fitted_efficiency_but_not_the_engines_own():
    hw = load_profile("mi300x")
    fam = load_engine("sglang").efficiency_family(hw)
    assert fam in hw.engine_efficiency  # the torch family's fitted entry
    one = CostParams.from_profile(hw, "fp8", load_engine("sglang"))
    half = CostParams.from_profile(hw, "fp8", load_engine("sglang").with_overrides(efficiency_scale={"bandwidth": 0.5}))
    assert half.bandwidth_bytes_per_s == pytest.approx(0.5 * one.bandwidth_bytes_per_s)
    assert half.matmul_flops_per_s == pytest.approx(one.matmul_flops_per_s)
    # an entry measured on this very engine (a local calibration) is that engine's: not scaled
    own = hw.model_copy(update={"engine_efficiency": {**hw.engine_efficiency, "sglang": hw.engine_efficiency[fam]}})
    eng = load_engine("sglang").with_overrides(efficiency_scale={"bandwidth": 0.5})
    assert CostParams.from_profile(own, "fp8", eng).bandwidth_bytes_per_s == pytest.approx(one.bandwidth_bytes_per_s)


def test_a_vendor_rule_sets_the_scale_and_the_cache_keys_on_its_effective_value():
    eng = EngineConfig.model_validate({**load_engine("sglang").model_dump(), "hardware_rules": [
        {"when": {"vendor": ["AMD"]}, "set": {"efficiency_scale": {"bandwidth": 0.8}}}]})
    assert eng.for_hardware(load_profile("mi300x")).efficiency_scale.bandwidth == 0.8
    assert eng.for_hardware(load_profile("h200")).efficiency_scale.bandwidth == 1.0
    assert rp.effective_scale({"bandwidth": 1.0}) is None
    assert rp.effective_scale({"bandwidth": 0.8}) == {"compute": 1.0, "bandwidth": 0.8, "attention": 1.0}
    # a point whose preset runs no scale (vLLM ships a bandwidth scale on NVIDIA only: an MI300X point)
    p = next(q for q in _points() if q.device == "mi300x")
    assert load_engine("vllm").for_hardware(load_profile(p.device)).efficiency_scale.bandwidth == 1.0
    # a neutral scale leaves the key as it was before the scale was a fitted field; a partial one is spelled out
    assert rp.cache_key(p, {"efficiency_scale": {"compute": 1.0, "bandwidth": 1.0, "attention": 1.0}}) == rp.cache_key(p, {})
    assert rp.cache_key(p, {"efficiency_scale": {"bandwidth": 0.8}}) == rp.cache_key(
        p, {"efficiency_scale": {"compute": 1.0, "bandwidth": 0.8, "attention": 1.0}}) != rp.cache_key(p, {})
    # a hardware rule that sets only the scale leaves the tree's fingerprint alone
    y = b"name: x\nefficiency_scale: {compute: 1.0, bandwidth: 1.0, attention: 1.0}\nhardware_rules:\n" \
        b"  - when: {kind: [gpu]}\n    set: {block_size: 16}\n"
    rule = b"  - when: {vendor: [AMD]}\n    set: {efficiency_scale: {bandwidth: 0.8}}\n    note: fitted\n"
    assert rp.engine_preset_digest(y) == rp.engine_preset_digest(y + rule)
    assert rp.engine_preset_digest(y) != rp.engine_preset_digest(y + rule.replace(b"}}\n", b"}, block_size: 8}\n"))


def test_each_vendor_group_with_two_sources_fits_its_scale_and_a_lone_source_group_none():
    pts = _points()
    got = es.fit_group_scales(pts, lambda p: {}, _fake, sf_fit.residuals, _loss, lambda p: True, 2)
    assert got == {"NVIDIA": 1.0, "AMD": 0.7}  # Apple: one source (E)


def test_held_out_a_source_takes_its_groups_scale_from_the_other_sources_and_the_ship_rule_follows():
    pts = _points()
    preds, folds = es.heldout_scales(pts, {}, sf_fit.point_params, _fake, sf_fit.residuals, _loss)
    assert folds["C"]["vllm"]["AMD"] == 0.7 and "Apple" not in folds["E"]["vllm"]
    for p in pts:
        if sf_fit.floor_group(p) == "Apple":  # no other Apple source: unscaled
            assert preds[p.key()]["tpot_ms|median"] == pytest.approx(10.0)
        else:
            assert preds[p.key()]["tpot_ms|median"] == pytest.approx(p.measured[("tpot_ms", "median")])
    knees: dict = {}
    floor_recs = sf_fit._records(pts, {p.key(): _fake(p, {}) for p in pts}, knees)
    final = es.final_scales(pts, {}, sf_fit.point_params, _fake, sf_fit.residuals, _loss)
    table = {r["group"]: r for r in es.ship_table(pts, floor_recs, sf_fit._records(pts, preds, knees), final, folds)}
    assert table["AMD"]["ship"] and table["AMD"]["fitted_scale"] == 0.7 and table["AMD"]["tpot_itl_scaled"] == 0.0
    assert not table["NVIDIA"]["ship"]  # its scale is 1: nothing to ship
    assert not table["Apple"]["ship"] and table["Apple"]["fitted_scale"] is None
    assert table["AMD"]["devices"] == ["mi300x", "mi355x"]
    assert any("AMD" in line and "ship yes" in line for line in es.scale_summary_lines(list(table.values())))
    # the scale was fitted over the family's fitted floor: where the preset does not run that floor, the same
    # held-out gain does not ship (an untested combination)
    gated = {r["group"]: r for r in es.ship_table(pts, floor_recs, sf_fit._records(pts, preds, knees), final, folds,
                                                    {"vllm": False})}
    assert gated["AMD"]["held_out_gain"] and not gated["AMD"]["ship"] and not gated["AMD"]["floor_shipped"]
    assert any("floor does not ship" in line for line in es.scale_summary_lines(list(gated.values())))


def test_the_committed_report_check_fails_when_a_preset_does_not_run_a_shipped_scale():
    from tests.test_serving_fit import _presets_ship_the_bandwidth_scales

    runs = {d: load_engine("sglang").for_hardware(load_profile(d)).efficiency_scale.bandwidth
            for d in ("mi300x", "mi355x")}
    row = {"family": "sglang", "group": "AMD", "devices": ["mi300x", "mi355x"], "fitted_scale": 0.7, "ship": False,
           "tpot_itl_floor": 30.0, "tpot_itl_scaled": 20.0, "output_tps_floor": 40.0, "output_tps_scaled": 30.0}
    fj = {"efficiency_scale": {"groups": [row], "final": {"sglang": {"AMD": 0.7}},
                               "shipped_bandwidth_scale_by_device": {"sglang": runs}}}
    if set(runs.values()) == {1.0}:  # no AMD scale ships: "no" passes, "ship" fails
        _presets_ship_the_bandwidth_scales(fj)
        row["ship"] = True
    else:  # a scale ships: a report saying "no" fails
        row["fitted_scale"] = fj["efficiency_scale"]["final"]["sglang"]["AMD"] = runs["mi300x"]
    with pytest.raises(AssertionError):
        _presets_ship_the_bandwidth_scales(fj)


def test_the_all_sources_scale_is_fitted_over_a_group_floor_only_where_its_split_ships():
    pts = _points()  # family vllm; groups by vendor: NVIDIA (A, B), AMD (C, D), Apple (E)
    final = {"vllm": {"layer_floor_us": 150.0, "floor_grouping": "vendor",
                      "layer_floor_us_by_group": {"AMD": 100.0, "NVIDIA": 75.0}}}

    def recs(err_of):  # TPOT and throughput records whose |error| is err_of(point)
        return [{"point": p.key(), "metric": m, "error": err_of(p)} for p in pts for m in ("tpot_itl", "output_tps")]

    split = recs(lambda p: 0.1 if sf_fit.floor_group(p) == "AMD" else 0.3)  # the split helps AMD, hurts NVIDIA
    one = recs(lambda p: 0.2)
    got = es.floors_as_shipped(pts, final, split, one)["vllm"]
    assert got["layer_floor_us_by_group"] == {"AMD": 100.0}  # NVIDIA's own floor does not ship: the family's
    assert {g: sf_fit.point_params(got, p)["layer_floor_us"] for p in pts
            for g in [sf_fit.floor_group(p)]} == {"NVIDIA": 150.0, "AMD": 100.0, "Apple": 150.0}
    assert es.floors_as_shipped(pts, final, one, one)["vllm"]["layer_floor_us_by_group"] == {}  # no gain: none
