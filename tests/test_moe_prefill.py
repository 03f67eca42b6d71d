"""MoE prompt steps (issue 38, session 45): the fused-MoE tile padding (`calibrate.serving.moe_tiles`: the tuned
config's BLOCK_SIZE_M by the step's tokens, the expected padded expert rows under uniform routing) and the
prompt-step diagnostic (`calibrate.serving.prefill_slope`: measured vs priced fixed and per-token parts)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from calibrate.serving.prefill_slope import (deployment_of, one_client_slope_us, padded_step_ms, prompt_step_markdown,
                                             prompt_step_rows, stall_per_prompt_ms)
from calibrate.serving.moe_tiles import (B200_DEEPSEEK_FP8_BLOCK_M, B200_E128_FP8_BLOCK_M, expected_padded_rows,
                                         fused_moe_block_m, padding_factor)
from sim.cost.roofline import CostModel


def test_block_m_is_the_tuned_entry_nearest_the_token_count():
    t = B200_DEEPSEEK_FP8_BLOCK_M
    assert fused_moe_block_m(734, t) == 16      # nearest key 512
    assert fused_moe_block_m(1100, t) == 32     # 1024
    assert fused_moe_block_m(1300, t) == 64     # 1536 is nearer than 1024
    assert fused_moe_block_m(768, t) == 16      # a tie (512 / 1024) takes the smaller key, as min() does
    assert fused_moe_block_m(100_000, t) == 64  # past the largest key: the largest key's
    assert fused_moe_block_m(600, B200_E128_FP8_BLOCK_M) == 64  # the other table turns to 64 rows at 512


@pytest.mark.parametrize("bad", [0, -3, float("nan")])
def test_block_m_refuses_a_step_without_tokens(bad):
    with pytest.raises(ValueError):
        fused_moe_block_m(bad, B200_DEEPSEEK_FP8_BLOCK_M)


def test_padded_rows_match_a_routing_simulation():
    # each token picks k distinct experts uniformly; count, pad each expert's rows to a multiple of B, average
    rng = np.random.default_rng(7)
    T, E, k, B = 300, 64, 4, 16
    totals = []
    for _ in range(400):
        counts = np.zeros(E, dtype=int)
        for _t in range(T):
            counts[rng.choice(E, size=k, replace=False)] += 1
        totals.append(np.sum(np.ceil(counts / B) * B))
    assert expected_padded_rows(T, E, k, B) == pytest.approx(np.mean(totals), rel=0.01)


def test_padding_factor_is_one_without_tiles_and_falls_with_rows_per_expert():
    assert padding_factor(500, 256, 8, 1) == pytest.approx(1.0)
    f = [padding_factor(t, 256, 8, 64) for t in (512, 2048, 8192, 32768)]
    assert f == sorted(f, reverse=True) and f[0] > 2.0 and f[-1] < 1.05
    # DeepSeek (256 experts, top-8) at a 4k prompt with the B200 table's 64 rows: ~22% more expert rows
    assert padding_factor(4025, 256, 8, 64) == pytest.approx(1.22, abs=0.01)


def test_routing_skew_packs_rows_and_pads_less():
    assert padding_factor(1000, 128, 4, 32, pool_fraction=0.5) < padding_factor(1000, 128, 4, 32)


def test_padded_rows_refuse_a_zero_tile():
    with pytest.raises(ValueError):
        expected_padded_rows(100, 64, 4, 0)


def test_padded_step_prices_more_expert_flops_and_leaves_the_model_alone():
    moe = CostModel.from_names("deepseek-r1", hw="b200", engine="sglang")
    plain = moe.step_time([4000], [0], [])
    padded = padded_step_ms(moe, 4000) / 1e3
    assert padded > plain  # compute-bound at 4k tokens: the padded rows cost time
    assert moe.step_time([4000], [0], []) == plain  # priced on a copy
    dense = CostModel.from_names("llama-3.1-8b", hw="b200", engine="sglang")
    assert padded_step_ms(dense, 4000) / 1e3 == pytest.approx(dense.step_time([4000], [0], []))


def _point(curve, load, prompt, out, **meas):
    keys = {"ttft": ("ttft_ms", "median"), "itl_mean": ("itl_ms", "mean"), "itl_med": ("itl_ms", "median")}
    return SimpleNamespace(curve_id=curve, load=load, load_kind="concurrency", prompt_lens=[prompt] * 5,
                           output_lens=[out] * 5, measured={keys[k]: v for k, v in meas.items()})


def test_deployment_is_the_curve_without_its_lengths():
    assert deployment_of("sglang-cookbook-glm-4.7-flash-b200-tp1-8000-1000") == (
        "sglang-cookbook-glm-4.7-flash-b200-tp1", 8000)
    assert deployment_of("no-lengths-here") is None


def test_one_client_slope_and_stall_per_prompt():
    short, long = _point("d-1000-1000", 1, 500, 400, ttft=100.0), _point("d-8000-1000", 1, 4500, 400, ttft=300.0)
    assert one_client_slope_us(short, long) == pytest.approx(50.0)  # 200 ms over 4000 tokens
    loaded = _point("d-1000-1000", 11, 500, 400, itl_mean=30.0, itl_med=25.0)
    assert stall_per_prompt_ms(loaded) == pytest.approx(5.0 * 400 / 10)
    assert stall_per_prompt_ms(_point("d-1000-1000", 1, 500, 400, itl_mean=30.0, itl_med=25.0)) is None


def test_rows_split_measured_and_priced_steps_into_fixed_and_per_token_parts():
    pts = [_point("d-1000-1000", 1, 500, 400, ttft=100.0),
           _point("d-1000-1000", 11, 500, 400, itl_mean=30.0, itl_med=25.0),   # stall 200 ms per prompt
           _point("d-8000-1000", 1, 4500, 400, ttft=300.0),
           _point("d-8000-1000", 11, 4500, 400, itl_mean=35.0, itl_med=25.0),  # stall 400 ms per prompt
           _point("d-1000-8000", 1, 500, 8000, ttft=120.0),                    # the short prompts again: +/- 20 ms
           _point("lonely-1000-1000", 1, 500, 400, ttft=90.0)]                  # no long curve: no row
    rows = prompt_step_rows(pts, lambda p, n: 10.0 + 0.01 * n)  # priced 10 ms + 10 us per token
    assert [r["deployment"] for r in rows] == ["d"]
    r = rows[0]
    assert r["c1_slope_meas_us"] == pytest.approx(50.0)
    assert r["c1_noise_us"] == pytest.approx(5.0)  # 20 ms repeat spread over 4000 tokens
    assert r["stall_ms"] == pytest.approx((200.0, 400.0))
    assert r["load_slope_us"] == pytest.approx(50.0) and r["load_intercept_ms"] == pytest.approx(175.0)
    assert r["priced_intercept_ms"] == pytest.approx(10.0) and r["priced_slope_us"] == pytest.approx(10.0)
    assert r["padded_ms"] is None and r["pred_stall_ms"] == (None, None) and r["pred_load_slope_us"] is None
    table = prompt_step_markdown(rows)
    assert len(table) == 3 and "| d | 500 / 4500 | 50.0 us (+/- 5.0) | 200 / -, 400 / - | 175 / 50.0 | - / - |" in table[2]


def test_predicted_stall_uses_the_same_estimate_on_the_replay():
    pts = [_point("d-1000-1000", 1, 500, 400, ttft=100.0), _point("d-1000-1000", 11, 500, 400, itl_mean=30.0, itl_med=25.0),
           _point("d-8000-1000", 1, 4500, 400, ttft=300.0), _point("d-8000-1000", 11, 4500, 400, itl_mean=35.0, itl_med=25.0)]
    # the replay: ITL mean 1 ms (short prompts) and 2 ms (long) above a 20 ms median
    replayed = {500: (21.0, 20.0), 4500: (22.0, 20.0)}
    r = prompt_step_rows(pts, lambda p, n: 10.0 + 0.01 * n, predicted_itl=lambda q: replayed[q.prompt_lens[0]])[0]
    assert r["pred_stall_ms"] == pytest.approx((40.0, 80.0))  # 1 ms x 400 tokens / 10 other requests
    assert r["pred_load_slope_us"] == pytest.approx(10.0) and r["pred_load_intercept_ms"] == pytest.approx(35.0)
