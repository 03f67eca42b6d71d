"""calibrate.serving.moe_prompt_excess: the unloaded TTFT residual against MoE properties (a diagnostic)."""

import math

import pytest

from calibrate.serving.moe_prompt_excess import (
    _lowest_ttft_rows,
    deployment,
    gpu_factor_needed,
    max_form_move,
    per_deployment,
    rank_correlations,
    reread_bytes_factor,
)


def test_reread_factor_is_one_with_one_block_per_expert_and_grows_with_rows_per_expert():
    # a block as wide as the whole step: every touched expert is one row block, read once
    assert reread_bytes_factor(64, 256, 8, 64) == pytest.approx(1.0)
    # 733 tokens over 256 experts, top-8: ~22.9 rows per expert, ~1.9 blocks of 16 rows each
    f = reread_bytes_factor(733, 256, 8, 16)
    assert 1.6 < f < 2.2
    # more rows per expert (ERNIE-like 64 experts, top-6): more blocks per expert
    assert reread_bytes_factor(733, 64, 6, 16) > f
    assert reread_bytes_factor(0, 256, 8, 16) == 1.0


def test_reread_factor_matches_a_hand_count_for_one_expert():
    # one expert, top-1: all T rows go to it, ceil(T / B) blocks, touched = 1
    assert reread_bytes_factor(40, 1, 1, 16) == pytest.approx(3.0)


def test_max_form_moves_only_above_the_floor():
    assert max_form_move(20.0, 40.0, 80.0) == 0.0
    assert max_form_move(20.0, 100.0, 80.0) == pytest.approx(20.0)
    assert max_form_move(90.0, 100.0, 80.0) == pytest.approx(10.0)


def test_gpu_factor_needed_closes_the_residual_under_the_max_form():
    x = gpu_factor_needed(30.0, 20.0, 80.0)
    assert max(20.0 * x, 80.0) == pytest.approx(80.0 + 30.0)
    assert gpu_factor_needed(5.0, 0.0, 10.0) == math.inf


def _row(cid, prompt, meas, pred, e=256, **kw):
    r = {"curve_id": cid, "prompt": prompt, "measured": meas, "predicted": pred, "n_experts": e}
    r.update(kw)
    return r


def test_per_deployment_takes_the_median_over_short_prompt_curves_and_skips_dense():
    rows = [_row("x-a-1000-1000", 733, 140.0, 100.0), _row("x-a-1000-8000", 733, 120.0, 100.0),
            _row("x-a-8000-1000", 4025, 500.0, 100.0), _row("x-dense-1000-1000", 733, 90.0, 60.0, e=0)]
    out = per_deployment(rows)
    assert [d["deployment"] for d in out] == ["x-a"]
    assert out[0]["residual_ms"] == pytest.approx(30.0)
    assert out[0]["rel"] == pytest.approx(0.3)
    assert out[0]["n_curves"] == 2
    assert deployment("sglang-cookbook-glm-4.7-flash-b200-tp1-8000-1000") == "sglang-cookbook-glm-4.7-flash-b200-tp1"


def test_rank_correlations_sign_and_constant_property():
    entries = [{"residual_ms": float(i), "n_experts": i * 10, "tp": 8} for i in range(6)]
    rc = rank_correlations(entries, ("n_experts", "tp"))
    assert rc["n_experts"][0] == pytest.approx(1.0)
    assert math.isnan(rc["tp"][0])


def test_lowest_ttft_rows_prefers_lowest_load_then_the_median():
    fid = {"rows": [
        {"curve_id": "c", "metric": "ttft_p50", "row_id": "c-c4-ttft_ms-median", "load": 4.0, "by_source": 1.0},
        {"curve_id": "c", "metric": "ttft_p50", "row_id": "c-c1-ttft_ms-mean", "load": 1.0, "by_source": 1.0},
        {"curve_id": "c", "metric": "ttft_p50", "row_id": "c-c1-ttft_ms-median", "load": 1.0, "by_source": 1.0},
        {"curve_id": "c", "metric": "tpot_itl", "row_id": "c-c1-tpot_ms-median", "load": 1.0, "by_source": 1.0},
        {"curve_id": "d", "metric": "ttft_p50", "row_id": "d-c1-ttft_ms-median", "load": 1.0, "by_source": 1.0}]}
    got = _lowest_ttft_rows(fid, "^c$")
    assert list(got) == ["c"]
    assert got["c"]["row_id"] == "c-c1-ttft_ms-median"
