"""Block-scaled FP8 checkpoints: which ones are (sim/catalog/weight_format.py) and the serving fit's held-out term
for them on AMD (calibrate/serving/blockfp8.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calibrate import serving_fit as sf
from calibrate.serving import blockfp8 as bf
from calibrate.serving import fit as sf_fit
from sim.catalog.weight_format import BLOCK_FP8_CATALOG_IDS, BLOCK_FP8_REPOS, is_block_fp8
from tests.test_serving_fit import _curve


def test_block_fp8_is_read_from_the_checkpoint_not_the_quant_name():
    assert is_block_fp8("deepseek-ai/DeepSeek-V3.1", "fp8") and is_block_fp8("MiniMaxAI/MiniMax-M2", "fp8")
    assert is_block_fp8("Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8", "fp8") and is_block_fp8("deepseek-r1", None)
    # per-channel FP8 (llm-compressor FP8_DYNAMIC, AMD Quark FP8-KV) and other formats of a block-FP8 model
    assert not is_block_fp8("RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic", "fp8")
    assert not is_block_fp8("amd/Llama-3.1-70B-Instruct-FP8-KV", "fp8") and not is_block_fp8("llama-3.1-70b", "fp8")
    assert not is_block_fp8("deepseek-r1", "nvfp4") and not is_block_fp8("qwen3.5-397b-a17b", "mxfp4")
    for repo, url in BLOCK_FP8_REPOS.items():  # each repository cites its own config.json
        assert url.lower() == f"https://huggingface.co/{repo}/blob/main/config.json"
    from sim.catalog.models import load_catalog
    assert BLOCK_FP8_CATALOG_IDS <= set(load_catalog())


def _curves(spec, tpot_of) -> list:
    """Load points of one curve per (publisher, device, model) of `spec`, TPOT `tpot_of(device, model)` and output
    tok/s C x 1000 / TPOT at C = 1, 4, 16; DeepSeek-R1 in fp8 (block-FP8), the others bf16."""
    pts = []
    for pub, dev, model in spec:
        t = tpot_of(dev, model)
        rows = _curve(f"b-{pub}-{dev}-{model}", {c: {"tpot_ms|median": t, "output_tps|value": c * 1000.0 / t}
                                                 for c in (1, 4, 16)},
                      publisher=pub, source=f"https://example.org/{pub}", device=dev, model=model)
        for r in rows:
            r["quant"] = "fp8" if model == "deepseek-r1" else "bf16"
        pts += sf.load_points(rows, catalog={"deepseek-r1", "llama-3.1-8b"})
    return pts


def _points():
    """Block-FP8 DeepSeek-R1 on AMD from two sources (A: mi300x, B: mi325x), a bf16 Llama on A's mi300x and the
    block-FP8 model on NVIDIA (C: h200): measured TPOT 22.857 ms and output tok/s C x 1000 / TPOT everywhere."""
    return _curves((("A", "mi300x", "deepseek-r1"), ("B", "mi325x", "deepseek-r1"), ("A", "mi300x", "llama-3.1-8b"),
                    ("C", "h200", "deepseek-r1")), lambda dev, model: (10.0 + 300.0 / 50.0) / 0.7)


def _fake(point, params, cache=None):
    """TPOT (10 + floor / 50) / bandwidth scale ms: the truth is floor 300 us and scale 0.7."""
    q = sf_fit.fit_params(params)
    tpot = (10.0 + q["layer_floor_us"] / 50.0) / q["efficiency_scale"].get("bandwidth", 1.0)
    return {"tpot_ms|median": tpot, "output_tps|value": point.load * 1000.0 / tpot}


def _stage(pts, fake=_fake):
    """blockfp8.run_stage over `pts` with every fold's floor 150 us, predictions from `fake` (tests/test_block_prefill.py
    passes its own, which prices TTFT too)."""
    floor = {"vllm": {"layer_floor_us": 150.0}}
    preds = {p.key(): fake(p, sf_fit.point_params(floor["vllm"], p)) for p in pts}
    return bf.run_stage(pts, {s: floor for s in "ABC"}, floor, preds,
                        (sf_fit.point_params, fake, sf_fit.residuals, lambda r: sf_fit._loss(r, sf_fit.STEP_METRICS)),
                        lambda pr: sf_fit._records(pts, pr, {}))


def test_the_term_is_fitted_on_the_other_source_and_touches_only_amd_block_fp8_points():
    pts = _points()
    assert [bf.in_group(p) for p in pts].count(True) == 6  # A's and B's DeepSeek, not the bf16 nor the NVIDIA one
    st = _stage(pts)
    v = st["table"]["vllm"]
    assert v["sources"] == ["A", "B"] and v["points"] == 6
    assert all(t == {"layer_floor_us": 300.0, "bandwidth_scale": 0.7} for t in v["fold_terms"].values())
    assert v["final_term"] == {"layer_floor_us": 300.0, "bandwidth_scale": 0.7}
    assert v["reference"]["tpot_itl"] > 40 and v["with_term"]["tpot_itl"] == 0.0 and v["others_unchanged"]
    assert v["ship"] and bf.ships(v["reference"], v["with_term"], (300.0, 0.7), True)
    assert not bf.ships(v["reference"], v["with_term"], bf.NEUTRAL, True)  # a neutral all-sources term
    assert not bf.ships(v["reference"], v["with_term"], (300.0, 0.7), False)  # another group moved
    assert not bf.ships(v["reference"], {**v["with_term"], "output_tps": v["reference"]["output_tps"]}, (300.0, 0.7),
                        True)  # throughput not better
    md = "\n".join(bf.block_markdown(st))
    assert bf.SHIP_RULE in md and "| vllm |" in md
    assert bf.block_summary_lines(st)[0].startswith("block-FP8 on AMD vllm: 2 sources")


def test_a_lone_source_keeps_the_neutral_term_and_does_not_ship():
    pts = [p for p in _points() if p.source != "B"]
    v = _stage(pts)["table"]["vllm"]
    assert v["final_term"] == {"layer_floor_us": None, "bandwidth_scale": 1.0}
    assert v["with_term"] == v["reference"] and not v["ship"]


def test_the_sglang_preset_prices_block_fp8_on_amd_only_and_an_explicit_value_still_wins():
    from sim.api import make_spec, resolve
    from sim.catalog.engine_config import load_engine
    from sim.catalog.hardware import load_profile

    trace = "workloads/examples/bursty.jsonl"

    def eng(model, quant, hw, **over):
        return resolve(make_spec(model=model, quant=quant, hw=hw, engine="sglang", trace=trace, overrides=over))[1]
    rule = next(r for r in load_engine("sglang").hardware_rules if r.when.weight_format)
    floor, bw = rule.set["layer_floor_us"], rule.set["efficiency_scale"]["bandwidth"]
    base = load_engine("sglang").for_hardware(load_profile("mi300x"))  # a device alone never applies it
    assert (base.layer_floor_us, base.efficiency_scale.bandwidth) != (floor, bw)
    for model, quant, hw, hit in (("deepseek-r1", "fp8", "mi300x", True), ("qwen3-coder-480b-a35b", "fp8", "mi325x", True),
                                  ("deepseek-r1", "fp8", "h200", False), ("llama-3.1-70b", "fp8", "mi300x", False),
                                  ("qwen3-coder-480b-a35b", "bf16", "mi300x", False),
                                  ("deepseek-r1", "fp8", "mi355x", False)):  # CDNA4: no fitted row
        e = eng(model, quant, hw)
        assert ((e.layer_floor_us, e.efficiency_scale.bandwidth) == (floor, bw)) == hit, (model, quant, hw)
    assert eng("deepseek-r1", "fp8", "mi300x", layer_floor_us=0.0).layer_floor_us == 0.0


def _mixed_points():
    """AMD points of two sources (A: mi300x, B: mi325x): a bf16 Llama whose truth is floor 100 us and bandwidth
    scale 0.9 (TPOT 13.33 ms under `_fake`) and the block-FP8 DeepSeek-R1 at floor 300 / scale 0.7 (22.86 ms),
    plus the block-FP8 model on NVIDIA (C: h200) at the Llama's truth."""
    truth = {"llama-3.1-8b": (10.0 + 100.0 / 50.0) / 0.9, "deepseek-r1": (10.0 + 300.0 / 50.0) / 0.7}
    return _curves((("A", "mi300x", "llama-3.1-8b"), ("B", "mi325x", "llama-3.1-8b"), ("A", "mi300x", "deepseek-r1"),
                    ("B", "mi325x", "deepseek-r1"), ("C", "h200", "deepseek-r1")),
                   lambda dev, model: truth["llama-3.1-8b" if dev == "h200" else model])


def _step_loss(recs):
    return sf_fit._loss(recs, sf_fit.STEP_METRICS)


def test_the_amd_vendor_scale_and_the_floor_are_fitted_without_the_block_fp8_group(monkeypatch):
    from calibrate.serving import effscale as es

    pts = _mixed_points()
    assert len(bf.shared(pts)) == 9 and not any(bf.in_group(p) for p in bf.shared(pts))

    def scales():
        return es.fit_group_scales(pts, lambda p: {"layer_floor_us": 100.0}, _fake, sf_fit.residuals, _step_loss,
                                   lambda p: True, 2)

    def floor():  # the AMD vendor group's own floor, as an AMD Llama point runs it
        ch = sf_fit.fit_engine_params(pts, {"vllm": sf_fit.shippable_grid()},
                                      lambda p, q: _fake(p, {**(q or {}), "efficiency_scale": {"bandwidth": 0.9}}),
                                      floor_grouping="vendor")
        return sf_fit.point_params(ch["vllm"], pts[0])["layer_floor_us"], ch["vllm"]["layer_floor_us_by_group"]
    assert scales() == {"AMD": 0.9} and floor() == (100.0, {"AMD": 100.0})  # the shared points' truth, exactly
    # the same fits fed the group's points (what they were before) land elsewhere: the test can fail
    monkeypatch.setattr(es, "trains", list)
    monkeypatch.setattr(sf_fit, "trains", list)
    assert scales() != {"AMD": 0.9} and floor()[0] != 100.0


def test_the_host_stage_neither_fits_nor_judges_on_the_block_fp8_group():
    from calibrate.serving import hoststage as hs

    pts = _mixed_points()
    grp = [p for p in pts if bf.in_group(p)]
    fns = (sf_fit.point_params, lambda p, q: _fake(p, q), sf_fit.residuals, _step_loss, sf_fit.front_end_values)
    ch = hs._chosen_with_host({}, grp, fns[0], hs._recs_factory(fns[1], fns[2]), _step_loss, fns[4], 1, False)
    assert ch["host_token_losses"] == {} and ch["host_token_us"] == 0.0  # nothing to fit on
    ch = hs._chosen_with_host({}, pts, fns[0], hs._recs_factory(fns[1], fns[2]), _step_loss, fns[4], 1, False)
    assert set(ch["host_token_losses"]) == set(hs.GRID_HOST_TOKEN_US)
    recs = sf_fit._records(pts, {p.key(): _fake(p, {}) for p in pts}, {})
    st = hs.run_stage(pts, {s: {} for s in "ABC"}, {}, recs, fns, 2, False, lambda pr: sf_fit._records(pts, pr, {}),
                      sf_fit.summarize)
    assert [(r["family"], r["points"]) for r in st["table"]] == [("vllm", 9)]  # judged on the shared points
    assert len(st["records"]) == len(recs)  # every point is still predicted


def test_the_bands_take_the_group_residuals_with_the_term_where_it_ships():
    from calibrate.serving.report import band_records

    pts = _mixed_points()
    recs = sf_fit._records(pts, {p.key(): _fake(p, {"layer_floor_us": 100.0}) for p in pts}, {})
    with_term = [{**r, "predicted": r["measured"], "error": 0.0} for r in recs]
    res = {"points": pts, "shipped_values": {p.engine: 120.0 for p in pts}, "request_only": {"records": recs},
           "baseline": {"records": []}, "block_fp8": {"table": {"vllm": {"ship": True}}, "records": with_term}}
    grp = {p.key() for p in pts if bf.in_group(p)}
    got = band_records(res)
    assert len(got) == len(recs) and {r["point"] for r in got} == {p.key() for p in pts}
    assert all((r["error"] == 0.0) == (r["point"] in grp) for r in got)
    res["block_fp8"]["table"]["vllm"]["ship"] = False  # a term that does not ship leaves them as they were
    assert band_records(res) == recs


def test_the_block_fp8_rule_replaces_a_vendor_bandwidth_scale_whatever_the_rule_order():
    from sim.catalog.engine_config import load_engine
    from sim.catalog.engine_settings import HardwareRule, RuleCondition
    from sim.catalog.hardware import load_profile
    from sim.catalog.weight_format import for_weight_format

    eng = load_engine("sglang")
    vendor = HardwareRule(when=RuleCondition(vendor=["AMD"]),
                          set={"efficiency_scale": {"compute": 1.0, "bandwidth": 1.1, "attention": 1.0}})
    block = next(r for r in eng.hardware_rules if r.when.weight_format)
    hw = load_profile("mi300x")
    for rules in ([*eng.hardware_rules, vendor], [vendor, *eng.hardware_rules]):
        e = eng.model_copy(update={"hardware_rules": rules}).for_hardware(hw)
        assert e.efficiency_scale.bandwidth == 1.1  # the vendor's scale, on every AMD checkpoint
        assert for_weight_format(e, hw, ("deepseek-r1",), "fp8").efficiency_scale.bandwidth == \
            block.set["efficiency_scale"]["bandwidth"]
        assert for_weight_format(e, hw, ("llama-3.1-70b",), "bf16").efficiency_scale.bandwidth == 1.1


def _presets_ship_the_block_fp8_term(fj: dict) -> None:
    """The AMD block-FP8 term per family, as the committed report (benchmarks/serving_fidelity.json `block_fp8`)
    says it ships: where its ship rule says yes, every group model on every group device (the preset's hardware
    rules, then its weight-format rules applied) runs the all-sources term as the fit priced it (blockfp8.with_term
    over fit.fit_params): floor max(the device's floor, the term's), bandwidth scale the term's, compute the
    prefill side's all-sources scale where that ships else 1.0, attention 1.0; where it says no, the checkpoint
    changes nothing; and a preset family with no shipped term has no weight-format rule at all. (A report
    generated before the term has no `block_fp8` section: nothing to check.)"""
    from sim.catalog.engine_config import load_engine
    from sim.catalog.hardware import load_profile
    from sim.catalog.weight_format import for_weight_format

    sec = fj.get("block_fp8")
    if sec is None:
        return
    prefill = sec.get("prefill") or {}
    for fam, v in sec["table"].items():
        eng = load_engine(fam)
        assert v["models"] and all(is_block_fp8(m, "fp8") for m in v["models"]), v["models"]
        pf = prefill.get(fam) or {}
        for d in v["devices"]:
            hw = load_profile(d)
            base = eng.for_hardware(hw)
            for m in v["models"]:
                got = for_weight_format(base, hw, (m,), "fp8")
                if not v["ship"]:
                    assert (got.layer_floor_us, got.efficiency_scale) == (base.layer_floor_us, base.efficiency_scale), \
                        (fam, d, m)
                    continue
                t = v["final_term"]
                floor = base.layer_floor_us if t["layer_floor_us"] is None else max(base.layer_floor_us,
                                                                                      t["layer_floor_us"])
                want = (floor, t["bandwidth_scale"], pf["final_compute"] if pf.get("ship") else 1.0, 1.0)
                es = got.efficiency_scale
                assert (got.layer_floor_us, es.bandwidth, es.compute, es.attention) == want, (fam, d, m)
    shipped = {f for f, v in sec["table"].items() if v["ship"]}
    from sim.catalog import engines as engines_pkg

    for f in sorted(p.stem for p in Path(engines_pkg.__file__).parent.glob("*.yaml")):
        if f not in shipped:
            assert not [r for r in load_engine(f).hardware_rules if r.when.weight_format], f


def test_the_sglang_preset_runs_the_block_fp8_term_the_committed_report_ships():
    from tests.test_serving_fit import ROOT

    fj = json.loads((ROOT / "benchmarks" / "serving_fidelity.json").read_text())
    assert "sglang" in fj["block_fp8"]["table"]  # the report this tree ships has SGLang's group in it
    _presets_ship_the_block_fp8_term(fj)


def test_the_committed_report_check_fails_when_the_preset_does_not_run_the_term_the_report_says():
    from sim.catalog.engine_config import load_engine

    rule = next(r for r in load_engine("sglang").hardware_rules if r.when.weight_format)
    runs = {"layer_floor_us": float(rule.set["layer_floor_us"]),
            "bandwidth_scale": float(rule.set["efficiency_scale"]["bandwidth"])}
    compute = float(rule.set["efficiency_scale"]["compute"])  # 1.0 = the prefill side does not ship
    v = {"devices": ["mi300x", "mi325x"], "models": ["deepseek-r1"], "ship": True, "final_term": dict(runs)}
    pf = {"ship": compute != 1.0, "final_compute": compute if compute != 1.0 else 0.3}
    fj = {"block_fp8": {"table": {"sglang": v}, "prefill": {"sglang": pf}}}
    _presets_ship_the_block_fp8_term(fj)  # the report as the preset runs it passes
    for bad in ({"final_term": {**runs, "bandwidth_scale": runs["bandwidth_scale"] - 0.1}},  # another scale
                {"final_term": {**runs, "layer_floor_us": runs["layer_floor_us"] + 100.0}},  # another floor
                {"ship": False},  # the report says it does not ship, the preset has the rule
                {"devices": ["mi355x"]}):  # a device the rule's scope leaves out
        with pytest.raises(AssertionError):
            _presets_ship_the_block_fp8_term({"block_fp8": {**fj["block_fp8"], "table": {"sglang": {**v, **bad}}}})
    with pytest.raises(AssertionError):  # the prefill side's verdict flipped: the preset runs the other compute
        _presets_ship_the_block_fp8_term({"block_fp8": {**fj["block_fp8"],
                                                        "prefill": {"sglang": {**pf, "ship": not pf["ship"]}}}})
    with pytest.raises(AssertionError):  # the prefill side ships another compute scale than the preset runs
        _presets_ship_the_block_fp8_term({"block_fp8": {**fj["block_fp8"], "prefill": {"sglang": {
            "ship": True, "final_compute": round(pf["final_compute"] + 0.1, 1)}}}})
    with pytest.raises(AssertionError):  # a family the report ships nothing for has the rule
        _presets_ship_the_block_fp8_term({"block_fp8": {"table": {}, "prefill": {}}})


def test_every_term_candidate_replays_a_full_scale_so_none_inherits_the_presets_rule():
    """A candidate naming only the bandwidth must not pick up the preset rule's prefill compute (0.3 on AMD
    block-FP8): the engine merges a partial efficiency_scale into the one its rule set, so `fit_params` spells
    every factor out (the neutral candidate and the others then differ in the bandwidth alone)."""
    from sim.api import make_spec, resolve

    def replayed_scale(term):
        params = sf_fit.fit_params(bf.with_term({"layer_floor_us": 150.0}, term))
        eng = resolve(make_spec(model="deepseek-r1", quant="fp8", hw="mi300x", engine="sglang",
                                trace="workloads/examples/bursty.jsonl", overrides=params))[1]
        return eng.efficiency_scale.model_dump()
    preset = resolve(make_spec(model="deepseek-r1", quant="fp8", hw="mi300x", engine="sglang",
                               trace="workloads/examples/bursty.jsonl"))[1].efficiency_scale
    assert preset.compute != 1.0  # the rule this guards against (if it ships 1.0 the check below is vacuous)
    for term in bf._TERMS:
        assert replayed_scale(term) == {"compute": 1.0, "bandwidth": term[1], "attention": 1.0}, term


def test_a_partial_scale_is_keyed_as_the_engine_merges_it():
    """The replay cache keys a partial efficiency_scale as the engine runs it (merged into the preset rule's, compute
    0.3 on an AMD block-FP8 point), not with its missing factors at 1.0; a full one keys as written."""
    from calibrate.serving import replay as rp

    from dataclasses import replace

    p = next(q for q in _mixed_points() if q.model == "deepseek-r1" and q.device == "mi300x")
    p = replace(p, engine="sglang@0.5", family="sglang")  # SGLang's preset carries the block-FP8 rule
    assert bf.in_group(p)
    pre = rp.effective_scale(rp.preset_fitted(p)["efficiency_scale"])
    assert pre["compute"] != 1.0
    merged = {**pre, "bandwidth": 0.7}
    assert rp.cache_key(p, {"efficiency_scale": {"bandwidth": 0.7}}) == rp.cache_key(p, {"efficiency_scale": merged})
    full = {"compute": 1.0, "bandwidth": 0.7, "attention": 1.0}
    assert rp.cache_key(p, {"efficiency_scale": full}) != rp.cache_key(p, {"efficiency_scale": merged})
