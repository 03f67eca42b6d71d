"""Faults: full disks and unwritable folders, SIGINT / SIGTERM to a running command, and what a Ray
started here listens on. Each ends in one line and loses no finished work (docs/invariants.md,
"Inputs, outputs and failures").

Tests run as root, where chmod-made read-only folders stay writable, so an unwritable folder is a
path under a regular file (ENOTDIR) and a full disk is `os.fsync` raising ENOSPC.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
from fake_openai_server import _Server, fake_server
from paths import INFERSIM
from typer.testing import CliRunner

import sim.files as files_mod
from sim.cli import app
from sim.errors import ConfigError
from sim.files import atomic_write, atomic_write_text, check_writable

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
CHAT = ROOT / "workloads" / "examples" / "chat.jsonl"


def _one_error_line(res, code: int = 2) -> str:
    assert res.exit_code == code, res.output
    errors = [x for x in res.output.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in res.output, res.output
    return errors[0]


def _disk_full(monkeypatch) -> None:
    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files_mod.os, "fsync", full)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.is_file())


# ---- write failures -----------------------------------------------------------------------------------


def test_atomic_write_failure_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    target = atomic_write_text(tmp_path / "a.txt", "old\n")
    with pytest.raises(ZeroDivisionError), atomic_write(target) as f:
        f.write("new, half")
        1 / 0
    _disk_full(monkeypatch)
    with pytest.raises(ConfigError, match="a.txt: cannot write: No space left on device"):
        atomic_write_text(target, "new\n")
    assert target.read_text() == "old\n" and _leftovers(tmp_path) == ["a.txt"]


def test_run_out_under_a_file_fails_before_simulating(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    res = runner.invoke(app, ["run", str(CHAT), "--out", str(blocker / "out")])
    line = _one_error_line(res)
    assert line.startswith(f"error: {blocker / 'out'}: --out: cannot write here") and "simulated" not in res.output


def test_run_out_on_a_full_disk_is_one_line_and_leaves_no_partial_file(tmp_path, monkeypatch):
    _disk_full(monkeypatch)
    out = tmp_path / "out"
    line = _one_error_line(runner.invoke(app, ["run", str(CHAT), "--out", str(out)]))
    assert "cannot write: No space left on device" in line
    assert _leftovers(out) == []  # no summary.json beside a cut requests.csv, no temporaries


def test_sweep_on_a_full_disk_is_one_line(tmp_path, monkeypatch):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"trace: {CHAT}\nhw: h100-sxm\ngrid:\n  concurrency: [1, 2]\n")
    _disk_full(monkeypatch)
    out = tmp_path / "out"
    line = _one_error_line(runner.invoke(app, ["sweep", str(sweep), "-o", str(out), "--workers", "1"]))
    assert "No space left on device" in line
    assert not [n for n in _leftovers(out) if n.endswith(".tmp")]


@pytest.mark.parametrize("args", [
    ["trace", "gen", "-o", "{out}/t.jsonl", "-n", "50", "--rate", "2"],
    ["trace", "convert", str(CHAT), "-o", "{out}/t.jsonl"],
    ["trace", "stats", str(CHAT), "--html", "{out}/s.html"],
    ["trace", "schema", "-o", "{out}/schema.json"],
])
def test_trace_outputs_on_a_full_disk_are_one_line_and_absent(tmp_path, monkeypatch, args):
    out = tmp_path / "o"
    out.mkdir()
    _disk_full(monkeypatch)
    line = _one_error_line(runner.invoke(app, [a.format(out=out) for a in args]))
    assert "cannot write: No space left on device" in line
    assert _leftovers(out) == []


@pytest.mark.parametrize("args", [
    ["trace", "stats", str(CHAT), "--html", "{blocked}/s.html"],
    ["plan", "--trace", str(CHAT), "--hw", "h100-sxm", "--ttft-p90", "1s", "--target-rps", "1",
     "--html", "{blocked}/p.html"],
    ["plan", "--trace", str(CHAT), "--hw", "h100-sxm", "--ttft-p90", "1s", "--target-rps", "1",
     "--out", "{blocked}/p"],
])
def test_outputs_under_a_file_are_one_line_exit_2(tmp_path, args):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    t0 = time.perf_counter()
    _one_error_line(runner.invoke(app, [a.format(blocked=blocker) for a in args]))
    assert time.perf_counter() - t0 < 5  # refused before a search, not after


@pytest.fixture
def tiny_disk(tmp_path):
    """A 64 KiB tmpfs: a really full disk, where this machine lets the tests mount one (root with
    CAP_SYS_ADMIN); skipped elsewhere (the ENOSPC tests above cover the same paths)."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True)
    if res.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def test_a_really_full_disk_is_one_line_and_leaves_no_partial_file(tmp_path, tiny_disk):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"arrival_s": 0.01 * i, "prompt_tokens": 100, "output_tokens": 20}) + "\n"
                             for i in range(2000)))
    for args in (["run", str(trace), "--out", str(tiny_disk / "out")],
                 ["trace", "gen", "-o", str(tiny_disk / "g.jsonl"), "-n", "5000", "--rate", "5"]):
        res = subprocess.run([INFERSIM, *args], env=_env(), capture_output=True, text=True, timeout=60)
        errors = [x for x in res.stderr.splitlines() if x.startswith("error:")]
        assert res.returncode == 2 and len(errors) == 1 and "Traceback" not in res.stderr, res.stderr
        assert "No space left on device" in errors[0]
    assert _leftovers(tiny_disk) == []  # nothing cut mid-row, no temporaries


def test_check_writable_refuses_a_folder_under_a_file(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(ConfigError, match="cannot write here"):
        check_writable(tmp_path / "f" / "sub")
    assert check_writable(tmp_path / "new" / "sub").is_dir()


# ---- exit statuses ------------------------------------------------------------------------------------


def test_run_exit_status_says_some_or_all_requests_were_rejected(tmp_path):
    ok = '{"arrival_s": 0, "prompt_tokens": 100, "output_tokens": 10}\n'
    too_long = '{"arrival_s": 0, "prompt_tokens": 200000, "output_tokens": 10}\n'
    for text, code in ((ok, 0), (too_long + ok, 1), (too_long, 3)):
        trace = tmp_path / "t.jsonl"
        trace.write_text(text)
        res = runner.invoke(app, ["run", str(trace)])
        assert res.exit_code == code, res.output
        if code:
            assert "exceeds the context limit of 131072 tokens" in res.output
            assert f"rejected {text.count('200000')} of {text.count(chr(10))} requests" in res.output


def test_plan_with_every_candidate_infeasible_exits_3(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "prompt_tokens": 200000, "output_tokens": 10}\n'
                     '{"arrival_s": 1, "prompt_tokens": 200000, "output_tokens": 10}\n')
    res = runner.invoke(app, ["plan", "--trace", str(trace), "--hw", "h100-sxm", "--ttft-p90", "1s",
                              "--target-rps", "1", "--workers", "1", "--json"])
    assert res.exit_code == 3, res.output


# ---- SIGINT / SIGTERM to a running command ------------------------------------------------------------


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"}


def _wait_for(cond, timeout_s: float, proc) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the command never reached the point to interrupt"
        time.sleep(0.05)


def _stop(proc, sig) -> tuple[int, float, str]:
    """Send `sig`; (exit status, seconds until exit, stderr)."""
    t0 = time.monotonic()
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return proc.returncode, time.monotonic() - t0, err


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.is_file() else 0


def _long_trace(tmp_path: Path, n: int) -> Path:
    trace = tmp_path / "long.jsonl"
    trace.write_text("".join(json.dumps({"arrival_s": round(0.05 * i, 3), "prompt_tokens": 400 + (37 * i) % 900,
                                         "output_tokens": 60 + (53 * i) % 300}) + "\n" for i in range(n)))
    return trace


def test_sigint_stops_a_sweep_within_2_s_keeping_finished_rows_and_resume_completes(tmp_path):
    trace = _long_trace(tmp_path, 800)
    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"trace: {trace}\nhw: h100-sxm\ngrid:\n  concurrency: [1, 2, 3, 4, 5, 6]\n")
    out = tmp_path / "out"
    journal = out / "results.jsonl"
    proc = subprocess.Popen([INFERSIM, "sweep", str(sweep), "-o", str(out), "--workers", "1"], env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: _lines(journal) >= 1, 60, proc)
    code, stop_s, err = _stop(proc, signal.SIGINT)
    assert code == 130 and stop_s < 2.0, (code, stop_s, err)
    assert "interrupted: finished combinations are in" in err and "--resume" in err and "Traceback" not in err
    kept = [json.loads(x) for x in journal.read_text().splitlines()]
    assert 1 <= len(kept) < 6 and all(r["status"] == "ok" for r in kept)
    res = subprocess.run([INFERSIM, "sweep", str(sweep), "-o", str(out), "--workers", "1", "--resume"], env=_env(),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert f"({len(kept)} resumed, 0 failed)" in res.stdout


def test_sigterm_stops_a_parallel_plan_within_2_s_and_resume_skips_the_journaled_candidates(tmp_path):
    trace = _long_trace(tmp_path, 400)
    out = tmp_path / "plan"
    args = [INFERSIM, "plan", "--trace", str(trace), "--hw", "h100-sxm", "--engine", "vllm,sglang",
            "--quant", "bf16,fp8", "--ttft-p90", "500ms", "--target-rps", "20", "--out", str(out)]
    proc = subprocess.Popen([*args, "--workers", "2"], env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    _wait_for(lambda: _lines(out / "candidates.jsonl") >= 1, 90, proc)
    workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert workers  # a process pool is running (the case that took 30 s to stop, issue 41)
    code, stop_s, err = _stop(proc, signal.SIGTERM)
    assert code == 130 and stop_s < 2.0, (code, stop_s, err)
    assert "interrupted: finished candidates are in" in err and "--resume" in err and "Traceback" not in err
    time.sleep(0.2)
    assert not [w for w in workers if Path(f"/proc/{w}").exists() and "zombie" not in
                Path(f"/proc/{w}/status").read_text().lower()], "worker processes outlived the plan"
    done = _lines(out / "candidates.jsonl")
    assert 1 <= done < 4 and not (out / "plan.json").exists()
    res = subprocess.run([*args, "--workers", "1", "--resume"], env=_env(), capture_output=True, text=True,
                         timeout=300)
    assert res.returncode in (0, 1), res.stderr  # 1: some candidate cannot meet the SLO
    assert res.stderr.count("done: ") == 4 and _lines(out / "candidates.jsonl") == 4  # nothing searched twice
    assert len(json.loads((out / "plan.json").read_text())["candidates"]) == 4


def test_sigint_stops_validate_within_2_s_and_writes_what_was_measured(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"arrival_s": 0.0, "prompt_tokens": 16, "output_tokens": 40}) + "\n"
                             for _ in range(4)))
    out = tmp_path / "out"
    with fake_server("slow") as url:
        proc = subprocess.Popen([INFERSIM, "validate", str(trace), "--hw", "h100-sxm", "--engine", "vllm",
                                 "--model", "llama-3.1-8b", "--endpoint", url, "--concurrency", "2",
                                 "--out", str(out)], env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        _wait_for(lambda: _Server.latest.count >= 2, 60, proc)  # both clients' first requests are streaming
        time.sleep(1.0)  # some tokens streamed, nothing finished (40 tokens at 0.1 s each)
        code, stop_s, err = _stop(proc, signal.SIGINT)
    assert code == 130 and stop_s < 2.0, (code, stop_s, err)
    assert "interrupted:" in err and f"written to {out}/measured" in err and "Traceback" not in err
    assert len([x for x in err.splitlines() if x.startswith("interrupted:")]) == 1
    lines = [json.loads(x) for x in (out / "measured" / "tokens.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and sum(len(x["token_times_s"]) for x in lines) > 0  # the tokens that came are kept
    assert (out / "measured" / "summary.json").is_file()


def test_sigint_stops_calibrate_within_2_s_and_writes_no_profile(tmp_path):
    profile = tmp_path / "box.yaml"
    with fake_server("slow") as url:
        proc = subprocess.Popen([INFERSIM, "calibrate", "--endpoint", url, "--model", "llama-3.1-8b", "--name", "box",
                                 "--quick", "--out", str(profile)], env=_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        _wait_for(lambda: _Server.latest.count >= 1, 60, proc)
        time.sleep(0.5)
        code, stop_s, err = _stop(proc, signal.SIGINT)
    assert code == 130 and stop_s < 2.0, (code, stop_s, err)
    assert "interrupted: no profile written" in err and "Traceback" not in err
    assert not profile.exists() and _leftovers(tmp_path) == []


# ---- Ray stays on this machine ------------------------------------------------------------------------


def test_a_ray_started_here_binds_loopback_and_no_dashboard(monkeypatch):
    """The arguments Ray gets (a real Ray start costs seconds: checked by hand with `ss -ltnp`,
    docs/invariants.md INV-F3)."""
    seen = {}
    fake = types.ModuleType("ray")
    fake.is_initialized = lambda: False
    fake.init = lambda **kw: seen.update(kw)
    consts = types.ModuleType("ray._private.ray_constants")
    consts.ENABLE_RAY_CLUSTER = True
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setitem(sys.modules, "ray._private", types.ModuleType("ray._private"))
    monkeypatch.setitem(sys.modules, "ray._private.ray_constants", consts)
    monkeypatch.delenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", raising=False)
    from sim.plan.executors import RayExecutor

    RayExecutor(num_cpus=1)
    assert seen["_node_ip_address"] == "127.0.0.1" and seen["dashboard_host"] == "127.0.0.1"
    assert seen["include_dashboard"] is False
    assert os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0" and consts.ENABLE_RAY_CLUSTER is False
    seen.clear()
    consts.ENABLE_RAY_CLUSTER = True
    monkeypatch.delenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
    RayExecutor(num_cpus=1, node_ip="10.0.0.5")  # the user opened it: that address, no loopback switch
    assert seen["_node_ip_address"] == "10.0.0.5" and consts.ENABLE_RAY_CLUSTER is True
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" not in os.environ
