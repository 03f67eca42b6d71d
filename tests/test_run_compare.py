"""`infersim run` with comma-separated options (side-by-side comparison) and `--efficiency-from`."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sim.catalog.engine_config import load_engine
from sim.catalog.hardware import load_profile
from sim.cli import app

ROOT = Path(__file__).resolve().parents[1]
N_USERS = str(ROOT / "workloads" / "examples" / "n-users.jsonl")
CHAT = str(ROOT / "workloads" / "examples" / "chat.jsonl")


def _run(*args):
    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:  # click >= 8.2 always keeps stderr apart
        runner = CliRunner()
    return runner.invoke(app, ["run", *args])


def test_comma_separated_engines_and_users_simulate_every_combination_exactly_as_single_runs():
    res = _run(N_USERS, "--hw", "dgx-spark", "--engine", "ollama,vllm", "--concurrency", "1,4", "--json")
    assert res.exit_code == 0, res.stderr
    runs = json.loads(res.stdout)["runs"]
    assert [(r["config"]["engine"], r["config"]["concurrency"]) for r in runs] == [
        ("ollama", 1), ("ollama", 4), ("vllm", 1), ("vllm", 4)]
    # each compared run is the very run a single invocation gives
    single = _run(N_USERS, "--hw", "dgx-spark", "--engine", "vllm", "--concurrency", "4", "--json")
    assert json.loads(single.stdout) == runs[3]
    # Ollama's default one slot serves 4 users one after another: the 4-user TTFT is far longer
    assert runs[1]["ttft_s"]["p50"] > 10 * runs[0]["ttft_s"]["p50"]


def test_comparison_table_names_only_what_varies(tmp_path):
    res = _run(N_USERS, "--hw", "dgx-spark", "--engine", "ollama,vllm", "--concurrency", "4", "--out", str(tmp_path))
    assert res.exit_code == 0, res.stderr
    assert "infersim run: comparison" in res.stdout
    assert "ollama" in res.stdout and "vllm" in res.stdout
    folders = sorted(p.name for p in tmp_path.iterdir())
    assert len(folders) == 2 and all((tmp_path / f / "summary.json").is_file() for f in folders)


def test_bad_comparison_values_are_one_line_errors():
    for args, message in (
        (["--concurrency", "1,0"], "error: --concurrency: must be >= 1, got 0"),
        (["--concurrency", "two"], "error: --concurrency: 'two' is not an integer"),
        (["--engine", "vllm,,ollama"], "error: --engine: empty item in 'vllm,,ollama'"),
    ):
        res = _run(N_USERS, *args)
        assert res.exit_code == 2
        assert res.stderr.strip() == message


def test_efficiency_from_keeps_the_target_peaks_and_takes_the_source_efficiencies(tmp_path):
    target = load_profile("h100-sxm")
    source = load_profile("cpu-x86-generic").model_dump(mode="json", exclude_none=True)
    source.update(name="measured-box", efficiency={"compute": 0.5, "bandwidth": 0.6, "attention": 0.7},
                  engine_efficiency={})
    path = tmp_path / "measured-box.yaml"
    path.write_text(yaml.safe_dump(source))
    res = _run(CHAT, "--hw", "h100-sxm", "--efficiency-from", str(path), "--json")
    assert res.exit_code == 0, res.stderr
    params = json.loads(res.stdout)["config"]["cost_params"]
    # H100's datasheet bandwidth x the source's bandwidth efficiency x vLLM's NVIDIA bandwidth scale (its preset)
    scale = load_engine("vllm").for_hardware(target).efficiency_scale.bandwidth
    assert params["bandwidth_bytes_per_s"] == pytest.approx(target.memory_bandwidth_gb_per_s * 1e9 * 0.6 * scale)
    assert params["matmul_flops_per_s"] == target.peak_tflops["bf16"] * 1e12 * 0.5
    assert "efficiencies from" in res.stderr and "peaks from h100-sxm" in res.stderr
    plain = json.loads(_run(CHAT, "--hw", "h100-sxm", "--json").stdout)["config"]["cost_params"]
    assert plain["bandwidth_bytes_per_s"] != params["bandwidth_bytes_per_s"]
