"""`infersim hw list|show` end to end: readable tables, sources shown, and every configuration error
printed as one line naming file, line and field, with exit status 2 and no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim.catalog.hardware import available_profiles
from sim.cli import app

REPO = Path(__file__).resolve().parents[1]
VALID = "name: x\nkind: gpu\nmemory_capacity_gib: 8\nmemory_bandwidth_gb_per_s: 5\npeak_tflops: {bf16: 1}\n"


@pytest.fixture
def runner(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERSIM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLUMNS", "80")
    return CliRunner()


def one_error_line(result) -> str:
    """The command failed with status 2 and printed exactly one `error: ...` line, no traceback."""
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output
    return lines[0]


@pytest.mark.parametrize(
    "text, expected",
    [
        (VALID.replace("memory_bandwidth_gb_per_s: 5", "memory_bandwidth_gb_per_s: -5"),
         ":4: memory_bandwidth_gb_per_s: Input should be greater than 0"),
        (VALID + "bandwith: 3\n", ":6: bandwith: unknown field"),
        (VALID.replace("kind: gpu\n", "kind: gpu\nkind: cpu\n"), ":3: kind: duplicate key"),
        (VALID.replace("memory_capacity_gib: 8", "memory_capacity_gib: [8]"), ":3: memory_capacity_gib: Input should be a valid number"),
        ("name: x\n  kind: gpu: 3\n", ":2: invalid YAML"),
    ],
    ids=["negative-bandwidth", "unknown-field", "duplicate-key", "wrong-type", "bad-yaml"],
)
def test_hw_show_bad_profile_prints_one_line_and_exits_2(runner, tmp_path, text, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    line = one_error_line(runner.invoke(app, ["hw", "show", str(path)]))
    assert line.startswith(f"error: {path}{expected}"), line


def test_hw_show_missing_file_exits_2(runner, tmp_path):
    line = one_error_line(runner.invoke(app, ["hw", "show", str(tmp_path / "gone.yaml")]))
    assert line == f"error: {tmp_path / 'gone.yaml'}: file not found"


def test_hw_show_unknown_name_suggests_close_matches(runner):
    line = one_error_line(runner.invoke(app, ["hw", "show", "rtx4090"]))
    assert line.startswith("error: --hw: unknown hardware profile 'rtx4090'; did you mean: rtx-4090")


def test_hw_list_names_a_broken_user_profile(runner, tmp_path):
    profiles = tmp_path / "home" / "profiles"
    profiles.mkdir(parents=True)
    (profiles / "mine.yaml").write_text(VALID + "peak_tflops_bf16: 3\n")
    line = one_error_line(runner.invoke(app, ["hw", "list"]))
    assert line == f"error: {profiles / 'mine.yaml'}:6: peak_tflops_bf16: unknown field"


def test_hw_list_fits_80_columns_and_shows_every_profile(runner):
    result = runner.invoke(app, ["hw", "list"])
    assert result.exit_code == 0, result.output
    table_lines = [ln for ln in result.stdout.splitlines() if "│" not in ln]
    assert max(len(ln) for ln in table_lines) <= 80
    names = {ln.split()[0] for ln in result.stdout.splitlines() if ln.strip() and ln.split()[0] in available_profiles()}
    assert names == set(available_profiles()), "every profile name printed whole, not truncated"
    assert "…" not in result.stdout


def test_hw_list_wide_adds_columns_without_truncating(runner):
    result = runner.invoke(app, ["hw", "list", "--wide"])
    assert result.exit_code == 0, result.output
    assert "int8 TOPS" in result.stdout and "buy $" in result.stdout and "…" not in result.stdout


def test_hw_show_prints_figures_and_sources(runner):
    result = runner.invoke(app, ["hw", "show", "h100-sxm"])
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())  # rich wraps long cells
    assert "3,350 GB/s" in out and "989.4" in out and "80 GiB" in out
    assert "compute capability 9.0" in out
    assert "https://glennklockwood.com/garden/processors/h100" in out
    assert "gpu_memory_utilization" in out  # provenance of the usable fraction


def test_real_subprocess_reports_config_error_on_one_line(tmp_path):
    """The installed console script, not just CliRunner: exit status 2 and one stderr line."""
    exe = Path(sys.executable).with_name("infersim")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "sim.cli"]
    bad = tmp_path / "neg.yaml"
    bad.write_text(VALID.replace("memory_bandwidth_gb_per_s: 5", "memory_bandwidth_gb_per_s: -1"))
    proc = subprocess.run([*cmd, "hw", "show", str(bad)], capture_output=True, text=True, timeout=60,
                          cwd=REPO, env={"PATH": "/usr/bin:/bin", "INFERSIM_HOME": str(tmp_path)})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == f"error: {bad}:4: memory_bandwidth_gb_per_s: Input should be greater than 0"
    assert proc.stdout == ""
