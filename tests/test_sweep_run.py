"""Running sweeps through the simulator: tables and report, failures recorded, resume, Ray = local."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from paths import INFERSIM

from sim.plan.executors import LocalExecutor, SerialExecutor
from sim.plan.runner import run_sweep
from sim.plan.sweep import load_sweep

REPO = Path(__file__).resolve().parents[1]

# Columns that depend on where and when a sweep ran, not on what was simulated.
PLACE_COLUMNS = ["trace"]


def _trace(path: Path, n: int = 24, gap_s: float = 0.25) -> Path:
    path.write_text("".join(
        json.dumps({"arrival_s": round(i * gap_s, 6), "prompt_tokens": 200 + 37 * (i % 7), "output_tokens": 16 + 5 * (i % 5)})
        + "\n" for i in range(n)))
    return path


def _sweep_file(tmp_path: Path, grid: str, n: int = 24) -> Path:
    _trace(tmp_path / "t.jsonl", n)
    p = tmp_path / "sweep.yaml"
    p.write_text(f"name: test sweep\ntrace: t.jsonl\nhw: h100-sxm\nmodel: llama-3.1-8b\ngrid:\n{grid}")
    return p


GRID = "  engine: [vllm, sglang]\n  concurrency: [1, 4]\n"


def test_sweep_simulates_every_combination_into_csv_parquet_and_a_self_contained_report(tmp_path):
    sweep = load_sweep(_sweep_file(tmp_path, GRID))
    out = run_sweep(sweep, tmp_path / "out", SerialExecutor())
    df = out.frame
    assert list(df["index"]) == [0, 1, 2, 3] and (df["status"] == "ok").all()
    assert (df["requests_completed"] == 24).all()
    # four users finish the same trace sooner than one: more throughput, on each engine
    for _, g in df.groupby("engine"):
        by_users = g.set_index("concurrency")["throughput_output_tok_s"]
        assert by_users[4] > by_users[1]
    csv = pd.read_csv(out.files["csv"])
    pq = pd.read_parquet(out.files["parquet"])
    assert len(csv) == len(pq) == 4
    assert csv["ttft_s_p90"].tolist() == pytest.approx(df["ttft_s_p90"].tolist())
    html = out.files["html"].read_text()
    assert "TTFT p90 vs load" in html and "Pareto" in html
    assert "<script src=\"http" not in html  # plotly.js is inlined: opens offline


def test_a_failing_combination_is_recorded_with_its_error_and_the_sweep_goes_on(tmp_path):
    sweep = load_sweep(_sweep_file(tmp_path, "  engine: [vllm, no-such-engine]\n  concurrency: [2]\n"))
    df = run_sweep(sweep, tmp_path / "out", SerialExecutor(), report=False).frame
    assert df["status"].tolist() == ["ok", "error"]
    assert "no-such-engine" in df.loc[1, "error"]
    assert df.loc[0, "requests_completed"] == 24


def test_resume_runs_only_the_combinations_missing_from_the_journal(tmp_path):
    sweep = load_sweep(_sweep_file(tmp_path, GRID))
    full = run_sweep(sweep, tmp_path / "full", SerialExecutor(), report=False).frame

    # An interrupted sweep: two rows written, the third cut off mid-line by a kill.
    journal_lines = (tmp_path / "full" / "results.jsonl").read_text().splitlines()
    part = tmp_path / "part"
    part.mkdir()
    (part / "results.jsonl").write_text("\n".join(journal_lines[:2]) + "\n" + journal_lines[2][:40])
    resumed = run_sweep(sweep, part, SerialExecutor(), resume=True, report=False)

    assert (resumed.ran, resumed.skipped) == (2, 2)
    written = (part / "results.jsonl").read_text().splitlines()
    assert written[:2] == journal_lines[:2]  # kept as they were; the half line is dropped
    new_keys = [json.loads(x)["key"] for x in written[2:]]
    done_keys = [json.loads(x)["key"] for x in journal_lines[:2]]
    assert len(new_keys) == 2 and not set(new_keys) & set(done_keys)
    pd.testing.assert_frame_equal(resumed.frame, full)


def test_ray_executor_gives_the_same_results_as_the_local_one(tmp_path):
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'infersim[ray]')")
    sweep = load_sweep(_sweep_file(tmp_path, GRID))
    local = run_sweep(sweep, tmp_path / "local", LocalExecutor(2), report=False).frame
    from sim.plan.executors import RayExecutor

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        on_ray = run_sweep(sweep, tmp_path / "ray", RayExecutor(), report=False).frame
    finally:
        ray.shutdown()
    pd.testing.assert_frame_equal(on_ray, local)


def test_killed_sweep_resumes_from_its_journal_through_the_real_cli(tmp_path):
    grid = "  engine: [vllm, sglang, tgi]\n  concurrency: [1, 2, 4, 8]\n"
    sweep_path = _sweep_file(tmp_path, grid, n=60)
    out = tmp_path / "out"
    journal = out / "results.jsonl"
    cmd = [str(INFERSIM), "sweep", str(sweep_path), "-o", str(out), "--workers", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if journal.exists() and journal.read_text().count("\n") >= 1:
                break
            time.sleep(0.02)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    before = [json.loads(x)["key"] for x in journal.read_text().splitlines() if x.endswith("}")]
    assert 1 <= len(before) < 12, "the sweep should have been killed part-way"

    done = subprocess.run([*cmd, "--resume"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    keys = [json.loads(x)["key"] for x in journal.read_text().splitlines() if x.endswith("}")]
    assert len(set(keys)) == 12
    assert all(keys.count(k) == 1 for k in before)  # finished combinations were not run again
    assert f"{len(before)} resumed" in done.stdout
    assert len(pd.read_csv(out / "results.csv")) == 12


def test_sweep_cli_reports_a_bad_file_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from sim.cli import app

    bad = tmp_path / "bad.yaml"
    bad.write_text("trace: nope.jsonl\nhw: h100-sxm\n")
    res = CliRunner().invoke(app, ["sweep", str(bad), "-o", str(tmp_path / "o")])
    assert res.exit_code == 2
    assert res.output.strip().splitlines()[-1].startswith(f"error: {bad}:1: trace: trace file not found")


def test_sweep_cli_replays_at_requested_rates_and_lists_its_files(tmp_path):
    from typer.testing import CliRunner

    from sim.cli import app

    path = _sweep_file(tmp_path, "  rate_rps: [2, 8]\n")  # the trace's own rate is 4 req/s
    res = CliRunner().invoke(app, ["sweep", str(path), "-o", str(tmp_path / "o"), "--workers", "1"])
    assert res.exit_code == 0, res.output
    df = pd.read_csv(tmp_path / "o" / "results.csv")
    assert df["offered_rps"].tolist() == pytest.approx([2.0, 8.0])
    # 24 requests at 2 req/s arrive over 11.5 s, at 8 req/s over 2.9 s
    assert df.loc[0, "duration_s"] > 11.5 and df.loc[1, "duration_s"] < df.loc[0, "duration_s"]
    for name in ("results.jsonl", "results.csv", "results.parquet", "report.html"):
        assert str(tmp_path / "o" / name) in res.stdout.replace("\n", "")


def test_results_table_columns_do_not_depend_on_the_order_workers_finish():
    # a column only some rows have (a block cache's blocks at the end) must land in one place
    from sim.plan.results import rows_to_frame

    rows = [{"index": 0, "key": "a", "status": "ok", "cached_blocks": 5, "ttft": 1.0},
            {"index": 1, "key": "b", "status": "ok", "ttft": 2.0}]
    in_order, reversed_ = rows_to_frame(rows), rows_to_frame(rows[::-1])
    assert list(in_order.columns) == list(reversed_.columns)
    assert in_order.equals(reversed_)
