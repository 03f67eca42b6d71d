"""Deployments checked before they run (issue 41): the engine x quantization x hardware x parallelism
table (sim/catalog/data/compat.yaml) makes impossible deployments a one-line error (exit 2) and
says when a deployment runs as something other than what was asked, priced as what really runs."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from sim.api import make_spec, run_spec
from sim.catalog.compat import rules, tp_heads_problem
from sim.catalog.hardware import load_profile
from sim.cli import app

TRACE = "workloads/examples/n-users.jsonl"


def _run(*args: str):
    return CliRunner().invoke(app, ["run", TRACE, "--concurrency", "1", *args])


@pytest.mark.parametrize(("args", "field", "rule"), [
    (["--engine", "ollama", "--quant", "fp8"], "--quant", "ggml-runs-gguf-only"),
    (["--engine", "llama.cpp", "--quant", "awq"], "--quant", "ggml-runs-gguf-only"),
    (["--tp", "3"], "--tp", "tp-divides-attention-and-kv-heads"),
    (["--hw", "apple-m4-max", "--engine", "vllm"], "--engine", "vllm-no-metal-backend"),
    (["--hw", "rtx-3090", "--engine", "trtllm", "--quant", "fp8"], "--quant", "trtllm-fp8-needs-ada-or-hopper"),
    (["--hw", "mi300x", "--engine", "trtllm"], "--engine", "trtllm-nvidia-only"),
    (["--hw", "mi300x", "--engine", "vllm", "--quant", "awq"], "--quant", "vllm-awq-gptq-not-on-amd"),
    (["--hw", "apple-m4-max", "--engine", "mlx", "--quant", "fp8"], "--quant", "mlx-runs-mlx-formats"),
])
def test_impossible_deployment_is_one_line_naming_the_option_and_exits_2(args, field, rule):
    res = _run(*args)
    assert res.exit_code == 2, res.output
    last = res.output.strip().splitlines()[-1]
    assert last.startswith(f"error: {field}: ") and last.endswith(f"[{rule}]")
    assert "infersim run" not in res.output  # nothing was simulated


def test_an_impossible_engine_in_a_comparison_fails_before_any_run():
    res = _run("--engine", "vllm,ollama", "--quant", "awq")
    assert res.exit_code == 2 and "config:" not in res.output


def test_fp8_on_ampere_runs_weight_only_is_said_and_priced_as_w8a16():
    a100 = load_profile("a100-80g")
    assert "fp8" not in a100.peak_tflops and a100.peak_flops("fp8") == a100.peak_flops("bf16")
    res = _run("--hw", "a100-80g", "--quant", "fp8", "--json")
    assert res.exit_code == 0, res.output
    assert "note: vllm fp8 on a100-80g runs as fp8 weights, bf16 compute (W8A16" in res.stderr
    s = json.loads(res.stdout)
    assert any("[vllm-fp8-on-ampere-is-weight-only]" in n for n in s["config"]["deployment_notes"])

    def summary(hw, quant):
        return run_spec(make_spec(trace=TRACE, hw=hw, quant=quant, concurrency=1, record_iterations=False)).summary

    fp8, bf16 = summary("a100-80g", "fp8"), summary("a100-80g", "bf16")
    # memory-bound decode reads half the weight bytes ...
    assert fp8["tpot_s"]["p50"] < 0.75 * bf16["tpot_s"]["p50"]
    # ... compute-bound prefill gets no FP8 tensor cores: nowhere near the 2x of an H100's FP8
    h_fp8, h_bf16 = summary("h100-sxm", "fp8"), summary("h100-sxm", "bf16")
    a_gain = bf16["ttft_s"]["p50"] / fp8["ttft_s"]["p50"]
    h_gain = h_bf16["ttft_s"]["p50"] / h_fp8["ttft_s"]["p50"]
    assert a_gain < h_gain
    assert "deployment_notes" not in h_fp8["config"]  # Hopper runs FP8 as asked


def test_side_by_side_shows_every_column_that_differs_quant_included():
    res = CliRunner().invoke(app, ["run", TRACE, "--hw", "dgx-spark", "--engine", "ollama,vllm", "--concurrency", "1"])
    assert res.exit_code == 0, res.output
    header = next(line for line in res.stdout.splitlines() if "engine" in line and "quant" in line)
    assert "kv" in header  # q4_k_m with an fp16 cache vs bf16 with a bf16 cache
    rows = [line for line in res.stdout.splitlines() if line.startswith("│")]
    assert any("ollama" in r and "q4_k_m" in r for r in rows) and any("vllm" in r and "bf16" in r for r in rows)


def test_tensor_parallel_degree_must_split_attention_and_kv_heads():
    m = SimpleNamespace(name="m", n_heads=40, n_kv_heads=8)
    assert tp_heads_problem(m, 1) is None and tp_heads_problem(m, 4) is None and tp_heads_problem(m, 8) is None
    assert "attention heads" in tp_heads_problem(m, 3)
    assert "KV heads" in tp_heads_problem(m, 5)  # 40 % 5 == 0, but 8 KV heads do not split 5 ways
    assert tp_heads_problem(SimpleNamespace(name="m", n_heads=32, n_kv_heads=8), 16) is None  # replicated 2x
    assert "replicate" in tp_heads_problem(SimpleNamespace(name="m", n_heads=48, n_kv_heads=8), 12)
    assert _run("--tp", "2").exit_code == 0


def test_every_rule_is_cited_and_the_table_loads():
    rs = rules()
    assert len({r.id for r in rs}) == len(rs) >= 7
    for r in rs:
        assert r.sources and all(s.get("url", "").startswith("https://") and s.get("what") for s in r.sources), r.id
        assert (r.outcome == "impossible") == bool(r.field) and (r.outcome == "runs_as") == bool(r.runs_as), r.id


def test_sweep_and_plan_record_an_impossible_combination_as_an_error_naming_the_rule(tmp_path):
    from sim.plan.planner import search_candidate
    from sim.plan.runner import run_combination
    from sim.plan.sweep import Combination

    combo = Combination(index=0, trace=str(tmp_path / "t.jsonl"), hw="h100-sxm", engine="ollama", quant="fp8")
    (tmp_path / "t.jsonl").write_text(open(TRACE).read())
    row = run_combination({"combination": combo.model_dump(), "costs": {}})
    assert row["status"] == "error" and "[ggml-runs-gguf-only]" in row["error"]
    out = search_candidate({"candidate": {"hw": "apple-m4-max", "engine": "vllm"},
                            "trace": "workloads/examples/chat.jsonl",
                            "slo": {"ttft_p90_s": 1.0}, "settings": {}, "seed": 0})
    assert "[vllm-no-metal-backend]" in out["error"]
