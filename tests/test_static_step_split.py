"""benchmarks/static_step_split.py: llama-batched-bench's batch decode step split into the cost model's terms
(docs/static-step.md)."""

import importlib.util
import math
import sys
from pathlib import Path

import pytest

_dir = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(_dir))
_spec = importlib.util.spec_from_file_location("static_step_split", _dir / "static_step_split.py")
ss = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ss)

CURVE = r"batchedbench-gpt-oss-120b-mxfp4-pp512-tg32$"


def test_terms_add_up_to_the_step_and_experts_grow_with_b():
    pts = ss.batched_bench_points(CURVE)
    assert sorted(b for _, b in pts) == [1, 2, 4, 8, 16, 32]
    by_b = {b: ss.point_split(rows, replay=False) for (_, b), rows in pts.items()}
    for b, s in by_b.items():
        # gemm + attention + overheads is the cost model's step (no decode correction on this profile)
        assert s["gemm"] + s["attn"] + s["ovh"] == pytest.approx(s["step"], rel=1e-9)
        # the GEMM phase is its two rooflines' larger
        assert s["gemm"] == pytest.approx(max(s["w_dense"] + s["w_exp"], s["floor"],
                                              max(s["mm_dense"] + s["mm_exp"], s["tile"])), rel=1e-9)
    # one token reads its k = 4 experts; a batch reads more, fewer than the pool E_c = c E
    assert by_b[1]["E_T"] == pytest.approx(4.0)
    e_c = by_b[32]["pool"] * 128
    assert 4.0 < by_b[2]["E_T"] < by_b[8]["E_T"] < by_b[32]["E_T"] < e_c
    # the implied fraction reproduces the measured step (B = 8: inside the grid [k / E, 1])
    c = by_b[8]["implied_pool"]
    assert 4 / 128 < c < 1.0


def test_pool_what_if_changes_only_the_model_it_names():
    rows = ss.batched_bench_points(CURVE)[(next(iter(ss.batched_bench_points(CURVE)))[0], 32)]
    base = ss.point_split(rows, replay=False)
    with ss.with_pools({"gpt-oss-120b": 0.25}):
        low = ss.point_split(rows, replay=False)
    with ss.with_pools({"gpt-oss-20b": 0.25}):
        other = ss.point_split(rows, replay=False)
    assert low["pool"] == 0.25 and low["E_T"] < base["E_T"] and low["step"] < base["step"]
    assert other["step"] == base["step"]
    # outside the context the catalog's fraction is back
    assert ss.point_split(rows, replay=False)["pool"] == base["pool"]
    assert not math.isnan(base["E_max_ds"]) and base["E_max_fit"] < base["E_max_ds"]
