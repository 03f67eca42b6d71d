"""SGLang 0.5.10+'s piecewise CUDA graphs for prompt steps (`sim.cost.prefill_graphs`, EngineConfig.prefill_graphs):
where server_args leaves them on a prompt step up to the captured token count skips the eager launch floor; a
release's `covers` range maps a printed version onto it; the ship rule (calibrate/serving/sgrelease.py) decides
as written."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from calibrate.serving.sgrelease import MIN_TTFT_GAIN_PT, ships
from sim.bench.serve import Deployment, ServeClient, run_client
from sim.catalog.engine_config import load_engine
from sim.catalog.hardware import load_profile
from sim.catalog.lookup import get_model
from sim.catalog.releases import apply_release
from sim.cost.eager_prefill import EagerPrefill, with_eager_prefill
from sim.cost.prefill_graphs import MLA_MAX_TOKENS, graph_max_tokens, prefill_graphs_active
from sim.errors import ConfigError

ON = load_engine("sglang").model_copy(update={"prefill_graphs": True, "eager_prefill_launch_us": 38.0})


def test_graphs_follow_sglangs_auto_disable_conditions():
    r1, llama = get_model("deepseek-r1"), get_model("llama-3.3-70b")
    h200, b300, mi300x = load_profile("h200"), load_profile("b300"), load_profile("mi300x")
    assert prefill_graphs_active(r1, ON, h200) and graph_max_tokens(r1, ON, h200) == MLA_MAX_TOKENS == 2048
    assert not prefill_graphs_active(r1, ON, b300)  # DeepseekV3 on sm100: flashinfer_trtllm MoE runner
    assert not prefill_graphs_active(llama, ON, mi300x)  # is_hip
    assert prefill_graphs_active(llama, ON, b300)  # dense GQA on a B300: on, up to chunked_prefill_size
    assert graph_max_tokens(llama, ON, h200) == ON.max_num_batched_tokens
    for name in ("qwen3-next-80b-a3b", "llama-4-scout", "gemma-3-27b", "qwen3.5-35b-a3b"):
        assert not prefill_graphs_active(get_model(name), ON, h200), name  # disabled arch / multimodal
    assert prefill_graphs_active(get_model("gemma-3-270m"), ON, h200)  # text-only Gemma3ForCausalLM
    off = ON.model_copy(update={"prefill_graphs": False})
    assert graph_max_tokens(r1, off, h200) == 0


class _Inner:
    tokens_per_step = 1.0

    def batch_time(self, b):
        return 0.010


def test_a_graphed_prompt_step_skips_the_floor_a_larger_one_keeps_it():
    m = EagerPrefill(_Inner(), 0.050, graph_max_tokens=2048)
    assert m.batch_time(SimpleNamespace(prefill_tokens=[900, 900], n_decode=0)) == 0.010  # 1,800 <= 2,048
    assert m.batch_time(SimpleNamespace(prefill_tokens=[900, 900], n_decode=300)) == 0.050  # 2,100 input ids
    assert m.batch_time(SimpleNamespace(prefill_tokens=[8000], n_decode=0)) == 0.050  # eager above the capture
    assert EagerPrefill(_Inner(), 0.050).batch_time(SimpleNamespace(prefill_tokens=[100], n_decode=0)) == 0.050


def test_wrapper_carries_the_cap_for_the_device():
    r1 = get_model("deepseek-r1")
    q = r1.quant("fp8")
    assert with_eager_prefill(_Inner(), r1, ON, q, load_profile("h200")).graph_max_tokens == 2048
    assert with_eager_prefill(_Inner(), r1, ON, q, load_profile("b300")).graph_max_tokens == 0


def _ttft_ms(hw: str, graphs: bool, isl: int) -> float:
    dep = Deployment(hw=hw, model="deepseek-r1", quant="fp8", engine="sglang",
                     overrides={"tp": 8, "eager_prefill_launch_us": 38.0, "request_overhead_ms": 0.0,
                                "prefill_graphs": graphs})
    c = ServeClient(num_prompts=3, random_input_len=isl, random_output_len=4, max_concurrency=1)
    return float(run_client(c, dep, date="t", per_request=False)["median_ttft_ms"])


def test_unloaded_ttft_loses_the_floor_only_where_the_graph_runs():
    assert _ttft_ms("h200", True, 1000) < 0.8 * _ttft_ms("h200", False, 1000)  # 1k prompt: graphed
    assert _ttft_ms("h200", True, 4000) == _ttft_ms("h200", False, 4000)  # above 2,048 tokens: eager
    assert _ttft_ms("b300", True, 1000) == _ttft_ms("b300", False, 1000)  # flashinfer_trtllm: eager


SECTION = {
    "name": "x",
    "default_release": "0.5",
    "releases": {"0.5": {"covers": ["0.5", "0.5.9"], "version": "0.5.0-0.5.9"},
                 "0.5.10": {"covers": ["0.5.10", "0.9"], "version": "0.5.10+", "set": {"prefill_graphs": True}},
                 "0.4": {"covers": ["0.4", "0.4"]}},
}


def _resolve(release):
    import copy
    from pathlib import Path

    return apply_release(copy.deepcopy(SECTION), Path("x.yaml"), release)


def test_a_printed_version_picks_the_release_whose_range_holds_it():
    assert _resolve("0.5.12")["release"] == "0.5.10" and _resolve("0.5.12")["prefill_graphs"] is True
    assert _resolve("0.5.13.post1")["release"] == "0.5.10"
    assert _resolve("0.5.10")["release"] == "0.5.10"
    for v in ("0.5.9", "0.5.6.post1", "0.5.8+", "0.5"):
        got = _resolve(v)
        assert got["release"] == "0.5" and "prefill_graphs" not in got, v
    assert _resolve("v0.4.9.post6")["release"] == "0.4"
    with pytest.raises(ConfigError, match=r"unknown release 'x@9\.9'; known: x@0\.5 \(0\.5-0\.5\.9\), "
                                         r"x@0\.5\.10 \(0\.5\.10-0\.9\), x@0\.4 \(0\.4-0\.4\)"):
        _resolve("9.9")


def test_ship_rule():
    before = {"ttft_p50": 40.0, "ttft_p99": 55.0, "tpot_itl": 19.0, "output_tps": 17.0}
    good = {**before, "ttft_p50": before["ttft_p50"] - MIN_TTFT_GAIN_PT - 0.1}
    assert ships(before, good)
    assert not ships(before, {**before, "ttft_p50": before["ttft_p50"] - 1.0})  # too small a gain
    assert not ships(before, before)
    assert not ships(before, {**good, "ttft_p99": before["ttft_p99"] + 2.5})
    assert not ships(before, {**good, "tpot_itl": before["tpot_itl"] + 1.5})
    assert not ships(before, {**good, "output_tps": before["output_tps"] + 1.5})
    # the measured subset runs of 2026-12-07 (calibrate/serving/sgrelease.py's finding): the rule fails
    run_before = {"ttft_p50": 38.5, "ttft_p99": 70.0, "tpot_itl": 24.7, "output_tps": 26.1}
    run_after = {"ttft_p50": 69.8, "ttft_p99": 60.8, "tpot_itl": 24.5, "output_tps": 24.7}
    assert not ships(run_before, run_after)


def test_the_shipped_preset_keeps_prompt_steps_eager():
    for name in ("sglang", "sglang@0.5", "sglang@0.5.12", "sglang@0.4"):
        assert load_engine(name).prefill_graphs is False, name
