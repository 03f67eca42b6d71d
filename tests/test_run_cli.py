"""`infersim run` end to end: CliRunner and a real subprocess."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from paths import INFERSIM
from typer.testing import CliRunner

from sim.cli import app

ROOT = Path(__file__).resolve().parents[1]
CHAT = str(ROOT / "workloads" / "examples" / "chat.jsonl")

SUMMARY_KEYS = {
    "config": None,
    "requests": {"total", "completed", "rejected"},
    "duration_s": None,
    "throughput": {"output_tok_s", "total_tok_s", "requests_per_s"},
    "ttft_s": {"mean", "p50", "p90", "p99"},
    "tpot_s": {"mean", "p50", "p90", "p99"},
    "itl_s": {"mean", "p50", "p90", "p99"},
    "e2e_s": {"mean", "p50", "p90", "p99"},
    "decode_tok_s_per_request": {"mean", "p50"},
    "kv": {"capacity_tokens", "peak_used_fraction", "peak_reserved_fraction", "preemptions"},
    "batch_size": {"mean", "max"},
    "verdict": {"state", "issues", "text", "percentile", "min_completed_for_percentile", "completed",
                "overloaded_from_s", "offered_rps", "served_rps", "in_system_growth_rps", "arrival_window_s",
                "median_e2e_s", "window_over_e2e"},  # issue 41, additive
    "prefix_cache": None,  # issue 8, additive: {enabled, kind, hit_rate, hit_tokens, ...}
}
CSV_COLUMNS = ["id", "arrival_s", "scheduled_s", "first_token_s", "finish_s", "prompt_tokens", "output_tokens",
               "ttft_s", "tpot_s", "e2e_s", "preemptions", "status", "reason"]


def _runner():
    try:
        return CliRunner(mix_stderr=False)
    except TypeError:  # click >= 8.2 always keeps stderr apart
        return CliRunner()


def _invoke(*args):
    return _runner().invoke(app, ["run", *args])


def test_json_output_has_exactly_the_contract_keys_and_nothing_else_on_stdout():
    res = _invoke(CHAT, "--json")
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)  # stdout is only the JSON
    assert list(data) == list(SUMMARY_KEYS)
    for key, sub in SUMMARY_KEYS.items():
        if sub is not None:
            assert set(data[key]) == sub, key
    assert data["requests"]["total"] == sum(1 for line in open(CHAT) if line.strip())
    assert data["requests"]["completed"] > 0
    cfg = data["config"]
    assert (cfg["model"], cfg["engine"], cfg["quant"]) == ("llama-3.1-8b", "vllm", "bf16")  # the defaults
    # the resolved configuration and the wall-clock figure went to stderr
    assert "config: hw=" in res.stderr and "s wall" in res.stderr


def test_human_output_prints_the_configuration_first_then_the_table():
    res = _invoke(CHAT, "--engine", "llama.cpp", "--max-seqs", "2")
    assert res.exit_code == 0, res.stderr
    assert res.stdout.index("config:") < res.stdout.index("TTFT")
    assert "max_num_seqs=2" in res.stdout and "scheduler=slots" in res.stdout


def test_overrides_reach_the_simulation():
    res = _invoke(CHAT, "--json", "--scheduler", "static", "--kv", "contiguous", "--max-seqs", "3",
                  "--max-batched-tokens", "16384", "--mem-fraction", "0.5", "--kv-dtype", "fp8",
                  "--quant", "fp8", "--concurrency", "4", "--seed", "7")
    assert res.exit_code == 0, res.stderr
    cfg = json.loads(res.stdout)["config"]
    assert (cfg["scheduler"], cfg["kv_allocator"], cfg["max_num_seqs"], cfg["max_num_batched_tokens"]) == (
        "static", "contiguous", 3, 16384)
    assert (cfg["memory_fraction"], cfg["kv_dtype"], cfg["quant"], cfg["concurrency"], cfg["seed"]) == (
        0.5, "fp8", "fp8", 4, 7)
    assert json.loads(res.stdout)["batch_size"]["max"] <= 3


def test_ubatch_option_reaches_the_simulation_and_the_config_line():
    res = _invoke(CHAT, "--engine", "llama.cpp", "--ubatch", "128")
    assert res.exit_code == 0, res.stderr
    assert "ubatch=128" in res.stdout
    js = _invoke(CHAT, "--engine", "llama.cpp", "--ubatch", "128", "--json")
    assert json.loads(js.stdout)["config"]["ubatch_tokens"] == 128
    bad = _invoke(CHAT, "--engine", "llama.cpp", "--ubatch", "0")
    assert bad.exit_code == 2 and "ubatch" in bad.stderr and "Traceback" not in bad.stderr


def test_no_flash_attn_prices_the_materialised_scores():
    base = ["--engine", "llama.cpp", "--hw", "rtx-4090", "--model", "llama-3.1-8b"]
    on = json.loads(_invoke(CHAT, *base, "--json").stdout)
    off = _invoke(CHAT, *base, "--json", "--no-flash-attn")
    assert off.exit_code == 0, off.stderr
    off = json.loads(off.stdout)
    assert on["config"]["flash_attention"] is True and off["config"]["flash_attention"] is False
    # the scores' bytes make every prompt slower
    assert off["ttft_s"]["mean"] > on["ttft_s"]["mean"]
    human = _invoke(CHAT, *base, "--no-flash-attn")
    assert "flash_attention=off" in human.stdout
    # Ollama runs Llama's attention unfused unless told (OLLAMA_FLASH_ATTENTION=1: --flash-attn)
    ollama = ["--engine", "ollama", "--hw", "rtx-4090", "--model", "llama-3.1-8b", "--json"]
    assert json.loads(_invoke(CHAT, *ollama).stdout)["config"]["flash_attention"] is False
    assert json.loads(_invoke(CHAT, *ollama, "--flash-attn").stdout)["config"]["flash_attention"] is True


def test_engine_file_overrides_fields_and_a_bad_field_names_file_and_line(tmp_path):
    good = tmp_path / "eng.yaml"
    good.write_text("max_num_seqs: 5\nblock_size: 32\n")
    res = _invoke(CHAT, "--json", "--engine-file", str(good))
    assert res.exit_code == 0, res.stderr
    cfg = json.loads(res.stdout)["config"]
    assert (cfg["max_num_seqs"], cfg["block_size"]) == (5, 32)
    bad = tmp_path / "bad.yaml"
    bad.write_text("block_size: 16\nmax_num_seqs: -3\n")
    res = _invoke(CHAT, "--engine-file", str(bad))
    assert res.exit_code == 2
    assert f"{bad}:2: max_num_seqs:" in res.stderr
    assert "Traceback" not in res.stderr


def test_out_writes_summary_requests_and_iteration_log(tmp_path):
    out = tmp_path / "run1"
    res = _invoke(CHAT, "--json", "--out", str(out))
    assert res.exit_code == 0, res.stderr
    assert json.loads((out / "summary.json").read_text()) == json.loads(res.stdout)
    df = pd.read_csv(out / "requests.csv", keep_default_na=False)
    assert list(df.columns) == CSV_COLUMNS
    assert set(df["status"]) <= {"completed", "rejected"}
    it = pd.read_csv(out / "iterations.csv")
    assert it["steps"].sum() >= len(it) and len(it) > 0


@pytest.mark.parametrize("args,message", [
    (["--engine", "vlm"], "unknown engine"),
    (["--hw", "h1000"], "unknown hardware profile"),
    (["--model", "llama-9"], "unknown model"),
    (["--quant", "q3"], "unknown quantization"),
    (["--scheduler", "fifo"], "scheduler"),
    (["--kv", "buddy"], "kv_allocator"),
    (["--concurrency", "0"], "concurrency"),
])
def test_bad_options_give_a_one_line_error_and_exit_2(args, message):
    res = _invoke(CHAT, *args)
    assert res.exit_code == 2, res.stdout
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], res.stderr


def test_a_bad_trace_line_is_named(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 5}\n{"arrival_s": 1, "prompt_tokens": -1, "output_tokens": 5}\n')
    res = _invoke(str(trace))
    assert res.exit_code == 2
    assert f"{trace}:2: prompt_tokens" in res.stderr


def test_subprocess_run_is_deterministic_and_matches_the_in_process_json():
    proc = subprocess.run([str(INFERSIM), "run", CHAT, "--engine", "sglang", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    again = _invoke(CHAT, "--engine", "sglang", "--json")
    assert proc.stdout == again.stdout  # byte-identical across processes
    assert json.loads(proc.stdout)["config"]["engine"] == "sglang"
