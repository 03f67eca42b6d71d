"""benchmarks/prefill_split.py: the kernel-group split of a replayed deployment's prefill (docs/long-prefill.md)."""

import importlib.util
import sys
from pathlib import Path

import pytest

_dir = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(_dir))
_spec = importlib.util.spec_from_file_location("prefill_split", _dir / "prefill_split.py")
ps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ps)


def _point(regex):
    import re

    from calibrate.serving.rows import curves, load_corpus, load_points

    cs = curves(load_corpus())
    cid = sorted(c for c in cs if re.search(regex, c))[0]
    return min(load_points(cs[cid]), key=lambda p: p.load)


def test_split_is_the_cost_model_and_attention_grows_quadratically():
    point = _point("sglang-cookbook-ernie-4.5-21b-a3b-pt-mi300x-tp1-8000-1000")  # one device, dense attention, MoE
    hw, engine, parts = ps.deployment(point, {})
    memo = {}
    a, b = (ps.prompt_split(point, {}, parts, engine, n, memo) for n in (4000, 8000))
    # one device: no communication; a MoE model: both GEMM groups priced
    assert a["comm"] == 0.0 and a["gemm_dense"] > 0 and a["gemm_moe"] > 0
    # causal attention over one chunk: keys ~ n^2 / 2, so twice the prompt is ~4x the attention time
    assert b["attention"] / a["attention"] == pytest.approx(4.0, rel=0.02)
    # the GEMM phases are linear in the tokens above the floor
    assert (b["gemm_dense"] + b["gemm_moe"]) / (a["gemm_dense"] + a["gemm_moe"]) == pytest.approx(2.0, rel=0.05)
    # the parts add up to the cost model's own step time of the single chunk
    step = parts.cost.step_time((8000,), (0,), ())
    assert sum(b[k] for k in ("gemm_dense", "gemm_moe", "attention", "comm", "overhead")) == pytest.approx(step, rel=1e-9)


def test_placement_split_adds_up_to_the_placed_step():
    point = _point("ix-api-mi325x-sglang-dsr1-fp8-mi325x-sglang-tp8ep1-isl8192-osl1024")  # TP8, MLA
    hw, engine, parts = ps.deployment(point, {})
    t = ps.chunk_terms(parts.cost, 8000, 0)
    assert t["comm"] > 0 and t["attention"] > 0
    step = parts.cost.step_time((8000,), (0,), ())
    assert sum(t[k] for k in ("gemm_dense", "gemm_moe", "attention", "comm", "overhead")) == pytest.approx(step, rel=1e-9)
