"""The per-layer kernel floor per (engine family, hardware vendor): the `vendor` / `generation` conditions of
an engine preset's hardware rules, the serving fit's per-vendor-group floor with its held-out folds and
ship rule, and the replay cache keyed on the floor a preset runs on the point's device (issue 38)."""

from __future__ import annotations

import pytest

from calibrate import serving_fit as sf
from calibrate.serving import fit as sf_fit
from calibrate.serving import replay as rp
from sim.catalog.engine_config import EngineConfig, load_engine, load_engine_file
from sim.catalog.engine_settings import RuleCondition, profile_field_values
from sim.catalog.hardware import load_profile
from sim.errors import ConfigError
from tests.test_serving_fit import SETS, _curve


# ---- the rule conditions ---------------------------------------------------------------------------
def test_vendor_and_generation_conditions_match_the_profiles_fields_in_any_case():
    amd, nv, b200 = load_profile("mi300x"), load_profile("h200"), load_profile("b200")
    assert RuleCondition(vendor=["AMD"]).matches(amd) and not RuleCondition(vendor=["AMD"]).matches(nv)
    assert RuleCondition(vendor=["nvidia"]).matches(nv) and RuleCondition(vendor=["amd", "nvidia"]).matches(nv)
    assert RuleCondition(generation=["Blackwell"]).matches(b200) and not RuleCondition(generation=["blackwell"]).matches(nv)
    # conditions combine with the others (all must hold)
    assert not RuleCondition(vendor=["NVIDIA"], max_memory_gib=100).matches(nv)
    assert RuleCondition().matches(amd)  # no condition: every device


def test_an_unknown_vendor_or_generation_is_an_error_naming_the_known_ones():
    assert {"NVIDIA", "AMD", "Apple"} <= profile_field_values("vendor")
    assert {"hopper", "blackwell", "cdna3"} <= profile_field_values("generation")
    with pytest.raises(ValueError, match=r"unknown vendor 'Nvida'; known: .*AMD.*NVIDIA"):
        RuleCondition(vendor=["Nvida"])
    with pytest.raises(ValueError, match=r"unknown generation 'hoper'; known: .*hopper"):
        RuleCondition(generation=["hoper"])


def test_a_preset_file_with_a_bad_vendor_is_a_one_line_error_naming_the_field(tmp_path):
    base = (tmp_path / "e.yaml")
    base.write_text("name: e\nbase: vllm\nlayer_floor_us: 10\nhardware_rules:\n"
                    "  - when: {vendor: [AMD]}\n    set: {layer_floor_us: 300}\n")
    eng = load_engine_file(base)
    assert eng.for_hardware(load_profile("mi300x")).layer_floor_us == 300
    assert eng.for_hardware(load_profile("h100-sxm")).layer_floor_us == 10
    base.write_text(base.read_text().replace("[AMD]", "[ADM]"))
    with pytest.raises(ConfigError) as e:
        load_engine_file(base)
    msg = str(e.value)
    assert "\n" not in msg and "vendor" in msg and "ADM" in msg and "AMD" in msg


def test_a_users_override_wins_over_a_vendor_rule():
    eng = EngineConfig.model_validate({**load_engine("vllm").model_dump(), "layer_floor_us": 10, "hardware_rules": [
        {"when": {"vendor": ["AMD"]}, "set": {"layer_floor_us": 300}}]})
    assert eng.for_hardware(load_profile("mi300x")).with_overrides(layer_floor_us=0).layer_floor_us == 0


# ---- the fit ---------------------------------------------------------------------------------------
#: true floor per vendor group: the fake prediction below reproduces a row's TPOT exactly at it
TRUE_FLOOR = {"NVIDIA": 100.0, "AMD": 300.0, "Apple": 25.0}
FLOORS = [{}] + [{"layer_floor_us": v} for v in (25.0, 50.0, 100.0, 150.0, 300.0)]


def _floor_points(spec: list[tuple[str, str]]) -> list:
    """Points of synthetic curves, one per (publisher, device), at C = 1, 4, 16, measured at the vendor's floor."""
    pts = []
    for pub, dev in spec:
        rows = _curve(f"lf-{pub}-{dev}", {c: {"ttft_ms|median": 50.0, "tpot_ms|median": 1.0} for c in (1, 4, 16)},
                      publisher=pub, source=f"https://example.org/{pub}", device=dev)
        pts += sf.load_points(rows, catalog=SETS["catalog"])
    for p in pts:
        p.measured[("tpot_ms", "median")] = 10.0 + 0.01 * TRUE_FLOOR[sf_fit.floor_group(p)]
    return pts


def _fake(point, params, cache=None, engine_set=None):
    q = params or {}
    return {"ttft_ms|median": 50.0 + float(q.get("request_overhead_ms", 0.0)),
            "tpot_ms|median": 10.0 + 0.01 * float(q.get("layer_floor_us", 0.0))}


SPEC = [("A", "h100-sxm"), ("B", "h200"), ("A", "b200"), ("C", "mi300x"), ("D", "mi355x"), ("E", "apple-m4-max")]


def test_each_vendor_group_with_two_sources_gets_its_own_floor_and_a_lone_source_group_the_familys():
    pts = _floor_points(SPEC)
    one = sf.fit_engine_params(pts, {"vllm": FLOORS}, _fake)["vllm"]
    assert "layer_floor_us_by_group" not in one  # without the split: one floor for every device
    got = sf.fit_engine_params(pts, {"vllm": FLOORS}, _fake, floor_grouping="vendor")["vllm"]
    assert got["layer_floor_us_by_group"] == {"NVIDIA": 100.0, "AMD": 300.0}  # Apple: one source (E)
    assert got.get("layer_floor_us") == one.get("layer_floor_us")  # the family's value is the pooled fit
    by_dev = {p.device: sf.point_params(got, p).get("layer_floor_us", 0.0) for p in pts}
    assert by_dev == {"h100-sxm": 100.0, "h200": 100.0, "b200": 100.0, "mi300x": 300.0, "mi355x": 300.0,
                      "apple-m4-max": got.get("layer_floor_us", 0.0)}
    # a host-cost entry chosen for the family leaves no floor variant to pick: no split
    host = [{"iteration_overhead_ms": 9.0}]
    assert "layer_floor_us_by_group" not in sf.fit_engine_params(pts, {"vllm": host}, _fake, floor_grouping="vendor")["vllm"]


def _heldout_vendor_and_family(pts):
    """The held-out-by-source fit of the floor grid per vendor group and with one floor, on the fake predictor."""
    orig = sf_fit.predict
    sf_fit.predict = _fake
    try:
        return (sf._heldout(pts, "source", {"vllm": FLOORS}, None, floor_grouping="vendor"),
                sf._heldout(pts, "source", {"vllm": FLOORS}, None))
    finally:
        sf_fit.predict = orig


def test_held_out_a_source_takes_its_groups_floor_from_the_other_sources_of_the_group():
    pts = _floor_points(SPEC)
    (preds, chosen), (preds1, chosen1) = _heldout_vendor_and_family(pts)
    # C (the mi300x rows) held out: AMD's floor from D alone; A held out: NVIDIA's from B alone
    assert chosen["C"]["vllm"]["layer_floor_us_by_group"]["AMD"] == 300.0
    assert chosen["A"]["vllm"]["layer_floor_us_by_group"]["NVIDIA"] == 100.0
    for p in pts:
        tpot = preds[p.key()]["tpot_ms|median"]
        fam_floor = float(chosen[p.source]["vllm"].get("layer_floor_us", 0.0))
        if sf_fit.floor_group(p) == "Apple":  # no other Apple source: the family's, fitted without E
            assert tpot == pytest.approx(10.0 + 0.01 * fam_floor)
        else:  # exact: its group's floor from the group's other source
            assert tpot == pytest.approx(p.measured[("tpot_ms", "median")])
        assert "layer_floor_us_by_group" not in chosen1[p.source]["vllm"]


def test_the_floor_ship_rule_ships_a_groups_value_only_where_held_out_it_beats_one_floor():
    pts = _floor_points(SPEC)
    (preds, chosen), (preds1, chosen1) = _heldout_vendor_and_family(pts)
    knees: dict = {}
    res = {"points": pts,
           "baseline": {"records": sf_fit._records(pts, {p.key(): _fake(p, {}) for p in pts}, knees)},
           "request_only": {"records": sf_fit._records(pts, preds, knees),
                            "final_params": sf.fit_engine_params(pts, {"vllm": FLOORS}, _fake, floor_grouping="vendor"),
                            "one_floor": {"records": sf_fit._records(pts, preds1, knees), "chosen": chosen1,
                                          "final_params": sf.fit_engine_params(pts, {"vllm": FLOORS}, _fake)}},
           "shipped_layer_floors_by_device": {}}
    from calibrate.serving.floor_report import floor_ship_rule

    rule = floor_ship_rule(res)["vllm"]
    fam = rule["NVIDIA"]["family_value"]
    assert set(rule) == {"NVIDIA", "AMD", "Apple"}
    assert not rule["Apple"]["own_value"] and not rule["Apple"]["ship"] and rule["Apple"]["value"] == fam
    for g in ("NVIDIA", "AMD"):
        v = rule[g]
        assert v["own_value"] and v["value"] == TRUE_FLOOR[g]
        # shipped exactly when the split's held-out TPOT beats one floor's (the group's truth differs from the pool's)
        assert v["ship"] == (v["value"] != fam and v["heldout_split"]["tpot_itl"] < v["heldout_one_floor"]["tpot_itl"])
    assert any(rule[g]["ship"] for g in ("NVIDIA", "AMD"))  # the pool cannot sit on both truths


# ---- the replay cache ------------------------------------------------------------------------------
def test_the_replay_cache_keys_on_the_floor_the_preset_runs_on_the_points_device():
    rows = (_curve("ck-nv", {1: {"ttft_ms|median": 20.0}}, device="h200")
            + _curve("ck-amd", {1: {"ttft_ms|median": 20.0}}, device="mi300x"))
    pts = {p.device: p for c in sf.curves(rows).values() for p in sf.load_points(c, catalog=SETS["catalog"])}
    for dev, p in pts.items():
        p.engine, p.family = "sglang@0.5", "sglang"
        want = load_engine("sglang").for_hardware(load_profile(dev)).layer_floor_us
        assert rp.preset_fitted(p)["layer_floor_us"] == want
        assert rp.cache_key(p, {}) == rp.cache_key(p, {"layer_floor_us": want})
    # a hardware rule that sets only fitted fields leaves the tree's fingerprint alone (the key spells the
    # effective value out), a rule that sets anything else does not
    y = b"name: x\nlayer_floor_us: 150\nhardware_rules:\n  - when: {kind: [gpu]}\n    set: {block_size: 16}\n"
    rule = b"  - when: {vendor: [AMD]}\n    set: {layer_floor_us: 300}\n    note: fitted\n"
    assert rp.engine_preset_digest(y) == rp.engine_preset_digest(y + rule)
    assert rp.engine_preset_digest(y) != rp.engine_preset_digest(y + rule.replace(b"layer_floor_us: 300",
                                                                                   b"layer_floor_us: 300, block_size: 8"))


def test_the_nested_choice_picks_the_grouping_that_predicts_an_unseen_source_best():
    """Truth by vendor: leave-one-source-out prefers "vendor" to one floor (the pool misses both vendors) and
    to "generation" (b200, mi300x and mi355x have a single source each, so they fall back to the pool)."""
    pts = _floor_points(SPEC)
    got = sf.fit_engine_params(pts, {"vllm": FLOORS}, _fake, floor_grouping="nested")["vllm"]
    assert got["floor_grouping"] == "vendor"
    losses = got["floor_grouping_losses"]
    assert set(losses) == set(sf_fit.FLOOR_GROUPINGS) and losses["vendor"] < min(losses["family"], losses["generation"])
    assert got["layer_floor_us_by_group"] == {"NVIDIA": 100.0, "AMD": 300.0}
    # one source: nothing to hold out, one floor
    lone = [p for p in pts if p.source == "A"]
    assert "floor_grouping" not in sf.fit_engine_params(lone, {"vllm": FLOORS}, _fake, floor_grouping="nested")["vllm"]


def test_the_committed_report_check_fails_when_a_preset_does_not_run_what_the_ship_rule_says():
    from tests.test_serving_fit import _presets_ship_the_per_group_floors

    top = load_engine("sglang").layer_floor_us
    runs = {d: load_engine("sglang").for_hardware(load_profile(d)).layer_floor_us for d in ("mi300x", "mi355x")}
    group = {"grouping": "vendor", "devices": ["mi300x", "mi355x"], "own_value": True, "value": 300.0, "ship": False,
             "heldout_split": {"tpot_itl": 20.0}, "heldout_one_floor": {"tpot_itl": 30.0}}
    fj = {"layer_floor": {"ship_rule": {"sglang": {"AMD": group}}}, "shipped_layer_floor_us": {"sglang": top},
          "shipped_layer_floor_us_by_device": {"sglang": runs},
          "request_only_by_source": {"final_params": {"sglang": {"layer_floor_us_by_group": {"AMD": 300.0}}}}}
    if set(runs.values()) == {top}:  # the presets ship no AMD rule: a report saying "no" passes, "ship" fails
        _presets_ship_the_per_group_floors(fj)
        group["ship"] = True
    else:  # an AMD rule ships: a report saying "no" fails
        group["value"] = fj["request_only_by_source"]["final_params"]["sglang"]["layer_floor_us_by_group"]["AMD"] = runs["mi300x"]
        group["ship"] = False
    with pytest.raises(AssertionError):
        _presets_ship_the_per_group_floors(fj)
