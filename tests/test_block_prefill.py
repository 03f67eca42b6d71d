"""The prefill side of the AMD block-FP8 term: a compute scale fitted on the group's TTFT p50 rows over the decode
term, held out by source (calibrate/serving/blockprefill.py)."""

from __future__ import annotations

from calibrate import serving_fit as sf
from calibrate.serving import blockfp8 as bf
from calibrate.serving import blockprefill as bp
from calibrate.serving import fit as sf_fit
from tests.test_block_fp8 import _stage as block_fp8_stage
from tests.test_serving_fit import _curve

TRUE_COMPUTE = 0.5  # in COMPUTE_GRID


def _fake(point, params, cache=None):
    """TPOT (10 + floor / 50) / bandwidth scale ms (the decode term's truth: floor 300 us, scale 0.7, as in
    tests/test_block_fp8.py) and TTFT 100 + 200 / compute scale ms (the truth: 0.5)."""
    q = sf_fit.fit_params(params)
    sc = q["efficiency_scale"]
    tpot = (10.0 + q["layer_floor_us"] / 50.0) / sc.get("bandwidth", 1.0)
    return {"tpot_ms|median": tpot, "output_tps|value": point.load * 1000.0 / tpot,
            "ttft_ms|median": 100.0 + 200.0 / sc.get("compute", 1.0)}


def _points(sources=("A", "B")):
    """Block-FP8 DeepSeek-R1 on AMD (A: mi300x, B: mi325x), a bf16 Llama on mi300x and the block-FP8 model on
    NVIDIA h200, all measured at the truth: TPOT 22.857 ms, TTFT 500 ms."""
    spec = [("A", "mi300x", "deepseek-r1"), ("B", "mi325x", "deepseek-r1"), ("A", "mi300x", "llama-3.1-8b"),
            ("C", "h200", "deepseek-r1")]
    pts = []
    t = (10.0 + 300.0 / 50.0) / 0.7
    for pub, dev, model in spec:
        if pub not in (*sources, "C") and model == "deepseek-r1":
            continue
        rows = _curve(f"p-{pub}-{dev}-{model}", {c: {"tpot_ms|median": t, "output_tps|value": c * 1000.0 / t,
                                                    "ttft_ms|median": 100.0 + 200.0 / TRUE_COMPUTE} for c in (1, 4, 16)},
                      publisher=pub, source=f"https://example.org/{pub}", device=dev, model=model)
        for r in rows:
            r["quant"] = "fp8" if model == "deepseek-r1" else "bf16"
        pts += sf.load_points(rows, catalog={"deepseek-r1", "llama-3.1-8b"})
    return pts


def _stage(pts):
    return block_fp8_stage(pts, fake=_fake)


def test_the_compute_scale_is_recovered_held_out_by_source_over_the_decode_term():
    st = _stage(_points())
    assert st["table"]["vllm"]["final_term"] == {"layer_floor_us": 300.0, "bandwidth_scale": 0.7}
    v = st["prefill"]["table"]["vllm"]
    assert v["fold_compute"] == {"A": TRUE_COMPUTE, "B": TRUE_COMPUTE} and v["final_compute"] == TRUE_COMPUTE
    # the decode term alone prices TTFT 300 ms against 500 (-40%); with the scale it is exact, TPOT untouched
    assert v["decode_term_only"]["ttft_p50"] == 40.0 and v["with_compute"]["ttft_p50"] == 0.0
    assert v["with_compute"]["tpot_itl"] == v["decode_term_only"]["tpot_itl"] == 0.0
    assert v["others_unchanged"] and v["ship"]
    # every point outside the group keeps its prediction (the NVIDIA DeepSeek and the bf16 Llama)
    grp = {p.key() for p in _points() if bf.in_group(p)}
    outside = [r for r in st["prefill"]["records"] if r["point"] not in grp and r["metric"] == "ttft_p50"]
    assert outside and all(abs(r["error"] + 0.4) < 1e-9 for r in outside)
    md = "\n".join(bf.block_markdown(st))
    assert bp.PREFILL_SHIP_RULE in md and "x0.5" in md
    assert any(s.startswith("block-FP8 on AMD prefill compute scale vllm: all sources x0.5")
               for s in bf.block_summary_lines(st))
    assert bf.block_json(st)["prefill"]["vllm"]["final_compute"] == TRUE_COMPUTE


def test_a_lone_source_keeps_no_compute_scale_and_does_not_ship():
    v = _stage(_points(sources=("A",)))["prefill"]["table"]["vllm"]
    assert v["final_compute"] == 1.0 and not v["ship"]


def test_the_prefill_ship_rule_decides_as_written():
    ref = {"ttft_p50": 60.0, "tpot_itl": 25.0, "output_tps": 29.0}
    assert bp.prefill_ships(ref, {"ttft_p50": 58.0, "tpot_itl": 26.0, "output_tps": 30.0}, 0.5, True)
    assert not bp.prefill_ships(ref, {"ttft_p50": 58.1, "tpot_itl": 25.0, "output_tps": 29.0}, 0.5, True)  # < 2 pts
    assert not bp.prefill_ships(ref, {"ttft_p50": 40.0, "tpot_itl": 26.1, "output_tps": 29.0}, 0.5, True)  # TPOT
    assert not bp.prefill_ships(ref, {"ttft_p50": 40.0, "tpot_itl": 25.0, "output_tps": 30.1}, 0.5, True)  # tput
    assert not bp.prefill_ships(ref, {"ttft_p50": 40.0, "tpot_itl": 25.0, "output_tps": 29.0}, 1.0, True)  # neutral
    assert not bp.prefill_ships(ref, {"ttft_p50": 40.0, "tpot_itl": 25.0, "output_tps": 29.0}, 0.5, False)  # others
    assert not bp.prefill_ships(ref, {"ttft_p50": 40.0, "tpot_itl": None, "output_tps": 29.0}, 0.5, True)


def test_with_compute_keeps_the_decode_terms_bandwidth_and_the_grid_starts_neutral():
    p = bf.with_term({"layer_floor_us": 100.0}, (400.0, 0.8))
    assert bp.with_compute(p, 0.4)["efficiency_scale"] == {"bandwidth": 0.8, "compute": 0.4}
    assert bp.with_compute(p, 1.0) == p and bp.COMPUTE_GRID[0] == 1.0
    assert all(0.0 < c <= 1.0 for c in bp.COMPUTE_GRID)


def test_a_compute_scale_slows_the_groups_long_prefill_not_its_decode():
    """On DeepSeek-V3.1 TP8 MI300X (the group's cookbook deployment) a compute scale of 0.5 lengthens a 4,800-token
    prefill (its GEMMs are compute-bound) and leaves a one-sequence decode step as it was (memory-bound)."""
    from sim.api import make_spec, resolve
    from sim.cost.roofline import CostModel

    _, base = resolve(make_spec(model="deepseek-v3", quant="fp8", hw="mi300x", engine="sglang",
                                trace="workloads/examples/bursty.jsonl", overrides={"tp": 8}))
    hw = "mi300x"
    # from compute 1.0 (whatever the preset's rule ships) to 0.5
    base = base.model_copy(update={"efficiency_scale": base.efficiency_scale.model_copy(update={"compute": 1.0})})
    slow = base.model_copy(update={"efficiency_scale": base.efficiency_scale.model_copy(update={"compute": 0.5})})
    a, b = CostModel.from_names("deepseek-v3", "fp8", hw, base), CostModel.from_names("deepseek-v3", "fp8", hw, slow)
    assert b.step_time([4800], [0], ()) > 1.2 * a.step_time([4800], [0], ())
    assert b.step_time((), (), (1000,)) == a.step_time((), (), (1000,))


def test_the_sglang_preset_sets_the_compute_scale_on_the_group_only():
    """Whatever value the `weight_format: [block-fp8]` rule ships for compute (1.0 while the term is off), it is the
    group's (AMD CDNA3, block-FP8) and no other deployment's."""
    from sim.api import make_spec, resolve
    from sim.catalog.engine_config import load_engine

    rule = next(r for r in load_engine("sglang").hardware_rules if r.when.weight_format)
    c = rule.set["efficiency_scale"]["compute"]

    def eng(model, quant, hw):
        return resolve(make_spec(model=model, quant=quant, hw=hw, engine="sglang",
                                 trace="workloads/examples/bursty.jsonl"))[1]
    for model, quant, hw, hit in (("deepseek-r1", "fp8", "mi300x", True), ("deepseek-r1", "fp8", "mi325x", True),
                                  ("deepseek-r1", "fp8", "h200", False), ("llama-3.1-70b", "fp8", "mi300x", False),
                                  ("deepseek-r1", "fp8", "mi355x", False)):
        got = eng(model, quant, hw).efficiency_scale.compute
        assert got == (c if hit else 1.0), (model, quant, hw, got)
