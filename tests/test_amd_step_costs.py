"""Where the AMD profiles' per-sequence step cost comes from, and what it adds to a decode step
(docs/cost-model.md, 'The per-sequence cost on AMD (torch family)'; session-45 audit of the MI350X
vLLM curves). These pin the facts the doc states: if the public fit or its transfer rule changes
them, the doc must change too."""

from __future__ import annotations

import dataclasses

import pytest

from sim.catalog.engine_config import load_engine
from sim.catalog.hardware import load_profile
from sim.cost.roofline import CostModel

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
    cm = CostModel.from_names("gpt-oss-120b", "mxfp4", prof, eng)
    if not profile_seq:  # the engine's own per-sequence cost only (the profile's device-side part removed)
        params = dataclasses.replace(cm.params, per_sequence_overhead_s=eng.per_sequence_overhead_ms / 1e3)
        cm = CostModel.from_names("gpt-oss-120b", "mxfp4", prof, eng, params=params)
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
