"""Tensor-parallel all-reduce priced by algorithm (sim.cost.parallel `allreduce_s`, `AllReducePolicy`):
hand-computed times per algorithm, the message-size switch, and the algorithm each engine preset picks."""

from __future__ import annotations

import numpy as np
import pytest

from calibrate.public.replay import _comm
from sim.catalog.engine_config import load_engine
from sim.catalog.hardware import load_profile
from sim.catalog.lookup import get_model
from sim.cost.params import CostParams
from sim.cost.parallel import (
    ONESHOT,
    TPAllReduce,
    RING,
    TWOSHOT,
    AllReducePolicy,
    ParallelConfig,
    allreduce_s,
    build_placement,
    ring_allreduce_s,
)
from sim.cost.roofline import CostModel

KIB = 1024.0
# 8 devices, NVLink 450 GB/s per direction, ring bus bandwidth 360 GB/s, a 5 us custom-kernel phase and a
# 2 us ring step; one-shot up to 256 KiB, two-shot up to 8 MiB
N, LINK, BUS, HOP, STEP = 8, 450e9, 360e9, 5e-6, 2e-6
POLICY = AllReducePolicy(oneshot_max_bytes=256 * KIB, custom_max_bytes=8192 * KIB)


def test_oneshot_small_message_by_hand():
    # 8 KiB (4 tokens x 1024 hidden x 2 bytes): 5 us + 7 x 8,192 B / 450 GB/s = 5 + 0.127431 = 5.127431 us
    t = allreduce_s(8 * KIB, N, LINK, BUS, HOP, STEP, POLICY)
    assert POLICY.algorithm(8 * KIB) == ONESHOT
    assert t == pytest.approx(5e-6 + 7 * 8192 / 450e9, rel=1e-12)
    assert t == pytest.approx(5.127431e-6, rel=1e-6)
    # the ring would pay 14 steps: 14 x 2 us + 1.75 x 8,192 / 360e9 = 28.0398 us
    assert ring_allreduce_s(8 * KIB, N, BUS, STEP) == pytest.approx(28.039822e-6, rel=1e-6)


def test_twoshot_and_ring_large_messages_by_hand():
    # 1 MiB: two-shot, 2 x 5 us + 2 x 7/8 x 1,048,576 / 450e9 = 10 + 4.07779 = 14.07779 us
    mib = 1024 * KIB
    assert POLICY.algorithm(mib) == TWOSHOT
    assert allreduce_s(mib, N, LINK, BUS, HOP, STEP, POLICY) == pytest.approx(14.077791e-6, rel=1e-6)
    # 64 MiB: beyond the custom buffer -> NCCL ring, 1.75 x 67,108,864 = 117,440,512 B / 360e9 = 326.2236 us, + 14 x 2 us
    big = 64 * mib
    assert POLICY.algorithm(big) == RING
    assert allreduce_s(big, N, LINK, BUS, HOP, STEP, POLICY) == pytest.approx(354.223644e-6, rel=1e-6)


def test_threshold_switch_is_at_the_limits_and_vectorised():
    sizes = np.array([256 * KIB, 256 * KIB + 1, 8192 * KIB, 8192 * KIB + 1])
    t = allreduce_s(sizes, N, LINK, BUS, HOP, STEP, POLICY)
    assert [POLICY.algorithm(float(b)) for b in sizes] == [ONESHOT, TWOSHOT, TWOSHOT, RING]
    assert t[0] == pytest.approx(HOP + 7 * sizes[0] / LINK)
    assert t[1] == pytest.approx(2 * HOP + 2 * 7 / 8 * sizes[1] / LINK)
    assert t[3] == pytest.approx(ring_allreduce_s(sizes[3], N, BUS, STEP))
    # at 256 KiB: one-shot 5 + 7 x 262,144 / 450e9 = 9.0778 us; two-shot 10 + 1.75 x 262,145 / 450e9 = 11.0195 us
    # (two-shot's second phase costs more than its 4x fewer bytes save until alpha L / (7 x 0.75) = 428.6 KB)
    assert t[0] == pytest.approx(9.077796e-6, rel=1e-6) and t[1] == pytest.approx(11.019453e-6, rel=1e-6)
    # no policy, or a policy without custom kernels: the ring at every size; one device costs nothing
    assert allreduce_s(8 * KIB, N, LINK, BUS, HOP, STEP) == pytest.approx(ring_allreduce_s(8 * KIB, N, BUS, STEP))
    assert allreduce_s(8 * KIB, 1, LINK, BUS, HOP, STEP, POLICY) == 0.0


def _on(name: str, tp: int):
    return load_engine(name).with_overrides(tp=tp, allreduce_algorithms=True)


@pytest.mark.parametrize("engine, hw, tp, oneshot_kib, custom_kib", [
    # vLLM: custom_all_reduce.cuh one-shot < 256 KiB at 8 GPUs, all_reduce_utils.py 256 KiB buffer (Hopper)
    ("vllm", "h100-sxm", 8, 256, 256),
    ("vllm", "h100-sxm", 4, 512, 32768),
    ("vllm", "b200", 8, 256, 1024),          # Blackwell: CUSTOM_ALL_REDUCE_MAX_SIZES['10.0'][8] = 1 MiB
    ("sglang", "h100-sxm", 8, 256, 8192),    # sgl-kernel's port, 8 MiB buffer
    ("trtllm", "h100-sxm", 8, 512, 512),     # AllReduceBestStrategyTableSM90, TP8: one-shot, then NCCL
    ("trtllm", "b200", 8, 2048, 4096),       # ...SM100: one-shot to 2 MiB, two-shot to 4 MiB
    ("trtllm", "h200", 2, 8192, 8192),
])
def test_each_engine_picks_its_algorithm(engine, hw, tp, oneshot_kib, custom_kib):
    pol = AllReducePolicy.for_engine(_on(engine, tp), tp, load_profile(hw))
    assert pol == AllReducePolicy(oneshot_kib * KIB, custom_kib * KIB)
    # DeepSeek-R1 decode, hidden 7168 in bf16 = 14,336 B per token: 4 sequences one-shot everywhere
    assert pol.algorithm(4 * 14336) == ONESHOT


def test_presets_keep_the_ring_and_pcie_amd_and_llamacpp_never_use_custom_kernels():
    h100 = load_profile("h100-sxm")
    for name in ("vllm", "sglang", "trtllm@0.x"):  # shipped off (docs/cost-model.md)
        assert not AllReducePolicy.for_engine(load_engine(name).with_overrides(tp=8), 8, h100).custom
    # TensorRT-LLM 1.0 ships on (AUTO): its TP8 Hopper table's one-shot limit
    assert AllReducePolicy.for_engine(load_engine("trtllm").with_overrides(tp=8), 8, h100).custom
    for hw in ("l40s", "rtx-4090", "mi300x"):  # PCIe (no P2P NVLink) and AMD: NCCL / RCCL's ring
        assert not AllReducePolicy.for_engine(_on("vllm", 2), 2, load_profile(hw)).custom
    assert not AllReducePolicy.for_engine(_on("vllm", 3), 3, h100).custom  # a TP size the preset does not list
    assert not AllReducePolicy.for_engine(load_engine("llama.cpp").with_overrides(tp=2), 2, h100).custom


def test_placement_prices_a_custom_kernels_shot_and_a_ring_step_at_the_familys_step_latency():
    """Llama-3.1-8B (32 layers, hidden 4096: 8,192 B per token) on 2 H100s with TRT-LLM's thresholds on:
    64 all-reduces per pass; at 4 tokens (32 KiB, one-shot) each costs one step at the family's fitted
    latency + 32,768 / 450e9; at 2,048 tokens (16 MiB, above the 8 MiB buffer) NCCL's ring, 2 steps."""
    hw, spec = load_profile("h100-sxm"), get_model("llama-3.1-8b")
    eng = _on("trtllm", 2)
    cm = CostModel.from_names(spec, "bf16", hw, eng)
    pl = cm.placement
    assert pl.comm_s_per_token == 0.0 and pl.comm_s_per_pass == 0.0 and pl.allreduce is not None
    fam = cm.parallel.interconnect_latency_s
    assert fam == pytest.approx(hw.efficiency_for("trtllm", "trtllm").interconnect_latency_us / 1e6)
    assert fam != pytest.approx(hw.interconnect_latency_us / 1e6)  # the family's, not the profile's link
    assert pl.allreduce.seconds(4) == pytest.approx(64 * (fam + 4 * 8192 / 450e9), rel=1e-12)
    ring = ring_allreduce_s(2048 * 8192, 2, (hw.allreduce_bus_bandwidth_gb_per_s or 450) * 1e9, fam)
    assert pl.allreduce.seconds(2048) == pytest.approx(64 * ring, rel=1e-12)
    # the public fit's split: fixed + steps x the family's latency, a one-shot one step, the ring 2 (N - 1)
    fixed, steps = _comm(hw, spec, 2, eng)(np.array([4.0, 2048.0]))
    assert steps.tolist() == [64 * 1.0, 64 * 2.0]
    assert (fixed + steps * fam) == pytest.approx(pl.allreduce.seconds(np.array([4.0, 2048.0])), rel=1e-12)
    # switched off (as vLLM, SGLang and TensorRT-LLM 0.x ship) the placement is the ring's, as before
    off = build_placement(spec, CostParams(1e12, 1e12, 1e12), ParallelConfig.for_profile(
        hw, 2, 1, latency_us=fam * 1e6,
        engine=load_engine("trtllm").with_overrides(tp=2, allreduce_algorithms=False)))
    assert off.allreduce is None and off.comm_s_per_pass == pytest.approx(64 * 2 * fam)


def test_decode_step_of_deepseek_r1_tp8_on_b200_drops_the_ring_latency_with_trtllms_kernels():
    """The miss behind issue 38's TRT-LLM B200 DeepSeek-R1 rows: 61 layers x 2 all-reduces x 14 ring steps at
    the family's fitted step made most of a 4-sequence decode step; one-shot kernels pay 122 x one step."""
    # the per-layer kernel floor (shipped in the preset) off: it would hold these all-reduces inside it
    off = CostModel.from_names("deepseek-r1", "fp8", "b200", load_engine("trtllm").with_overrides(
        tp=8, layer_floor_us=0, allreduce_algorithms=False))
    on = CostModel.from_names("deepseek-r1", "fp8", "b200", _on("trtllm", 8).with_overrides(layer_floor_us=0))
    ctx = [1200] * 4
    b_off, b_on = off.breakdown(decode_context=ctx), on.breakdown(decode_context=ctx)
    step = off.parallel.interconnect_latency_s
    assert b_off["comm_s"] >= 122 * 14 * step
    assert b_on["comm_s"] == pytest.approx(122 * (step + 7 * 4 * 14336 / 900e9), rel=1e-9)
    assert b_on["step_s"] < b_off["step_s"] - 0.9 * 122 * 14 * step


def test_the_public_fits_split_counts_a_two_shot_as_two_steps_and_scales_a_different_hop():
    pol = AllReducePolicy(64 * KIB, 1024 * KIB)
    same = TPAllReduce(10, 4, 8192.0, LINK, BUS, 3e-6, 3e-6, pol)
    tokens = np.array([4.0, 64.0, 1024.0])  # 32 KiB one-shot, 512 KiB two-shot, 8 MiB ring
    fixed, steps = same.terms(tokens)
    assert steps.tolist() == [10.0, 20.0, 10 * 6.0]
    assert fixed + steps * 3e-6 == pytest.approx(same.seconds(tokens), rel=1e-12)
    other = TPAllReduce(10, 4, 8192.0, LINK, BUS, 6e-6, 3e-6, pol)  # a hop twice the step: 2 steps a shot
    fixed, steps = other.terms(tokens)
    assert steps.tolist() == [20.0, 40.0, 60.0]
    assert fixed + steps * 3e-6 == pytest.approx(other.seconds(tokens), rel=1e-12)


def test_the_kernel_fit_prices_a_rows_all_reduces_by_its_own_engine_releases_switch(monkeypatch):
    """TensorRT-LLM's AUTO tables are 1.x's: its 0.x release keeps the ring whatever 1.0 does, and a corpus row
    replays the switch of the release its engine_version maps to (calibrate/public/replay.py)."""
    import calibrate.public.replayers as replayers
    from calibrate.public.replay import row_allreduce_algorithms
    from calibrate.public_fit import PublicCorpus, row_shape

    assert load_engine("trtllm@0.x").allreduce_algorithms is False
    rows = {r.row_id: r for r in PublicCorpus.load().rows}
    new = rows["trtllm-v1.0-h100-sxm-llama-3.3-70b-fp8-tp2-128-2048"]
    old = rows["trtllm-v0.13-h100-sxm-llama-3.1-70b-fp8-tp2-128-2048"]
    assert row_allreduce_algorithms(old) is False
    assert row_allreduce_algorithms(new) is load_engine("trtllm").allreduce_algorithms
    steps = {}
    for on in (False, True):
        monkeypatch.setattr(replayers, "row_allreduce_algorithms", lambda row, on=on: on)
        steps[on] = np.asarray(row_shape(new).comm_steps, dtype=float)
    # 80 layers x 2 all-reduces: the ring's 2 (N - 1) = 2 steps each, a one-shot kernel's 1 (decode messages
    # of a few hundred sequences are under TP2's 8 MiB one-shot limit)
    assert steps[False].max() == 160 * 2.0 and steps[True].min() == 160 * 1.0
