"""Where the AMD profiles' per-sequence step cost comes from, and what it adds to a decode step
(docs/cost-model.md, 'The per-sequence cost on AMD (torch family)'; session-45 audit of the MI350X
vLLM curves). These pin the facts the doc states: if the public fit or its transfer rule changes
them, the doc must change too."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sim.catalog.engine_config import load_engine
from sim.catalog.hardware import load_profile, with_efficiency_fields
from sim.cost.roofline import CostModel
from sim.errors import ConfigError

CDNA_TRANSFERRED = ("mi325x", "mi350x", "mi355x")


def test_mi300x_torch_per_sequence_cost_is_fitted_on_its_own_vllm_rows():
    e = load_profile("mi300x").engine_efficiency["torch"]
    assert not e.transferred_from
    assert e.per_sequence_ms == pytest.approx(0.0825, abs=5e-4)
    assert e.floor_ms == 0.0
    # every row it was fitted to is ROCm vLLM's dev-docker benchmark_latency table of one model:
    # Llama-3.1-70B FP8 at TP 8, batch 1-128, 128 or 2048 prompt tokens, 2048 output tokens
    assert len(e.corpus_rows) == 64
    assert all(r.startswith("rocm-vllm-devdocker-") and "llama-3.1-70b-fp8-tp8" in r for r in e.corpus_rows)


@pytest.mark.parametrize("device", CDNA_TRANSFERRED)
def test_other_amd_parts_take_the_mi300x_per_sequence_cost_by_transfer(device):
    """`_launch_costs` (calibrate/public/transfer.py) lends the floor and the per-sequence cost
    within the vendor, across generations: CDNA4 (MI350X, MI355X) gets CDNA3's MI300X value."""
    mi300x = load_profile("mi300x").engine_efficiency["torch"]
    e = load_profile(device).engine_efficiency["torch"]
    assert e.transferred_from == ["mi300x"]
    assert not e.corpus_rows
    assert e.per_sequence_ms == mi300x.per_sequence_ms


def _decode_step_ms(hw: str, tp: int, seqs: int, *, floor_us: float, profile_seq: bool) -> float:
    prof = load_profile(hw)
    eng = load_engine("vllm").for_hardware(prof).with_overrides(tp=tp, layer_floor_us=floor_us)
    if not profile_seq:  # the engine's own per-sequence cost only (the profile's device-side part removed),
        # as benchmarks/amd_step_variants.py removes it (replay's efficiency_overrides)
        prof = with_efficiency_fields(prof, eng.name, eng.efficiency_family(prof), {"per_sequence_ms": 0.0})
    cm = CostModel.from_names("gpt-oss-120b", "mxfp4", prof, eng)
    # a decode step of `seqs` sequences at the curves' mean context (921 prompt + ~460 output tokens)
    return cm.step_time(decode_context=[1380] * seqs) * 1e3


def test_mi350x_gpt_oss_decode_step_decomposition():
    """The figures the doc quotes for gpt-oss-120b MXFP4 on one MI350X under the vLLM preset
    (Together AI's InferenceX curves measure 4.54 / 6.73 / 14.92 ms median TPOT at C = 4 / 16 / 128)."""
    shipped = {c: _decode_step_ms("mi350x", 1, c, floor_us=150, profile_seq=True) for c in (4, 128)}
    no_floor = {c: _decode_step_ms("mi350x", 1, c, floor_us=0, profile_seq=True) for c in (4, 128)}
    neither = {c: _decode_step_ms("mi350x", 1, c, floor_us=0, profile_seq=False) for c in (4, 128)}
    # the floor, 36 layers x 150 us = 5.4 ms, alone exceeds the measured C = 4 step (4.54 ms)
    assert shipped[4] > 36 * 0.150 > 4.54
    # the profile's per-sequence cost adds 128 x 0.0825 ms = 10.6 ms at C = 128
    assert no_floor[128] - neither[128] == pytest.approx(128 * 0.0825, rel=0.01)
    # without both, the step's slope is the extra experts streamed: ~70 us per added sequence
    slope_us = (neither[128] - neither[4]) / 124 * 1e3
    assert 55 < slope_us < 85
    # ... and the measured slope is 84 us per added sequence: the profile's 82.5 us on top doubles it
    assert (no_floor[128] - no_floor[4]) / 124 * 1e3 > 1.8 * slope_us


# ---- the override benchmarks/amd_step_variants.py replays with ----------------------------------------
def test_removing_the_profiles_per_sequence_cost_leaves_the_engines_own():
    prof = load_profile("mi350x")
    eng = load_engine("vllm").for_hardware(prof)
    from sim.cost.params import CostParams

    shipped = CostParams.from_profile(prof, "mxfp4", eng, True)
    bare = with_efficiency_fields(prof, eng.name, eng.efficiency_family(prof), {"per_sequence_ms": 0.0})
    params = CostParams.from_profile(bare, "mxfp4", eng, True)
    assert params.per_sequence_overhead_s == pytest.approx(eng.per_sequence_overhead_ms / 1e3)
    assert shipped.per_sequence_overhead_s - params.per_sequence_overhead_s == pytest.approx(0.0825e-3)
    assert params.bandwidth_bytes_per_s == shipped.bandwidth_bytes_per_s  # nothing else moves
    assert bare.engine_efficiency["torch"].per_sequence_ms == 0.0
    assert prof.engine_efficiency["torch"].per_sequence_ms == pytest.approx(0.0825, abs=5e-4)  # not mutated
    with pytest.raises(ConfigError, match="unknown efficiency field"):
        with_efficiency_fields(prof, eng.name, eng.efficiency_family(prof), {"per_seq": 0.0})


def _point(device: str, c: int = 4):
    from calibrate.serving.rows import LoadPoint

    n = 2 * c
    return LoadPoint(curve_id=f"test-{device}", source="test", device=device, engine="vllm", family="vllm",
                     model="gpt-oss-120b", quant="mxfp4", tp=1, kv_dtype=None, overrides={}, load_kind="concurrency",
                     load=float(c), num_prompts=n, replayed_prompts=n, prompt_lens=[128] * n, output_lens=[64] * n,
                     release_s=[0.0] * n, max_concurrency=c)


def test_a_replay_with_efficiency_overrides_prices_the_step_without_the_profiles_per_sequence_cost():
    """calibrate.serving.replay.replay(..., efficiency_overrides=) reaches the simulated engine: at C = 4
    with no per-layer floor each decode step of 4 sequences is 4 x 0.0825 ms shorter; None changes nothing."""
    from calibrate.serving.replay import cache_key, replay

    p = _point("mi350x")
    params = {"layer_floor_us": 0.0}
    shipped = replay(p, params, None)
    assert replay(p, params, None, efficiency_overrides=None) == shipped
    bare = replay(p, params, None, efficiency_overrides={"per_sequence_ms": 0.0})
    assert shipped["tpot_ms|median"] - bare["tpot_ms|median"] == pytest.approx(4 * 0.0825, rel=0.05)
    # the cache keeps the variants apart, and a key without overrides is the one it always was
    assert cache_key(p, params, {"per_sequence_ms": 0.0}) != cache_key(p, params) == cache_key(p, params, None)


def test_the_variants_script_removes_the_cost_on_amd_torch_points_only():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from amd_step_variants import seq_overrides

    assert seq_overrides(_point("mi350x"), "engine") == {"per_sequence_ms": 0.0}
    assert seq_overrides(_point("mi350x"), "profile") is None
    assert seq_overrides(_point("h200"), "engine") is None  # an NVIDIA profile: replayed as shipped
