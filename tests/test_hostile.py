"""Hostile input: misbehaving HTTP servers on 127.0.0.1, unusable URLs, huge numbers in traces,
conflicting options. Each must end in bounded time and memory with one line (docs/invariants.md,
"Inputs, outputs and failures")."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from fake_openai_server import fake_server
from typer.testing import CliRunner

from calibrate.replay.http import MAX_LINE_BYTES, stream_byte_cap
from sim.cli import app

runner = CliRunner()


def _trace(path: Path, n: int = 2, *, out: int = 8) -> Path:
    path.write_text("".join(json.dumps({"arrival_s": 0.0, "prompt_tokens": 16, "output_tokens": out}) + "\n"
                            for _ in range(n)))
    return path


def _one_error_line(res, code: int = 2) -> str:
    """The command failed with `code` and said so in exactly one line, no traceback."""
    assert res.exit_code == code, res.output
    lines = [x for x in res.output.splitlines() if x.strip()]
    errors = [x for x in lines if x.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in res.output, res.output
    return errors[0]


def _replay(url: str, trace: Path, *args: str):
    t0 = time.perf_counter()
    res = runner.invoke(app, ["replay", str(trace), "--endpoint", url, "--concurrency", "1", *args])
    return res, time.perf_counter() - t0


# ---- misbehaving servers ------------------------------------------------------------------------------


def test_endless_stream_is_cut_after_twice_max_tokens_chunks_and_the_request_fails(tmp_path):
    out = tmp_path / "out"
    with fake_server("endless") as url:
        res, wall_s = _replay(url, _trace(tmp_path / "t.jsonl", 2, out=8), "--out", str(out), "--timeout-s", "30")
    assert res.exit_code == 1 and wall_s < 10
    df = pd.read_csv(out / "requests.csv")
    assert (df["status"] == "failed").all()
    assert df["reason"].str.contains("server kept streaming: 33 chunks for max_tokens=8").all()


def test_a_line_that_never_ends_is_abandoned_at_the_line_cap(tmp_path):
    out = tmp_path / "out"
    with fake_server("huge_line") as url:
        res, wall_s = _replay(url, _trace(tmp_path / "t.jsonl", 1), "--out", str(out), "--timeout-s", "30")
    assert res.exit_code == 1 and wall_s < 10
    reason = pd.read_csv(out / "requests.csv")["reason"][0]
    assert f"a line passed {MAX_LINE_BYTES:,} bytes" in reason


def test_stream_byte_cap_grows_with_the_requested_tokens_and_is_megabytes_not_gigabytes():
    assert stream_byte_cap(1) < stream_byte_cap(1000) < 100 * 2**20
    assert stream_byte_cap(8) == MAX_LINE_BYTES + 8 * 64 * 1024


def test_keepalives_forever_do_not_outlast_timeout_s(tmp_path):
    """A server that sends `: ping` forever resets any per-read timeout; --timeout-s is a total."""
    with fake_server("keepalive") as url:
        res, wall_s = _replay(url, _trace(tmp_path / "t.jsonl", 2), "--timeout-s", "1")
    assert res.exit_code == 1, res.output
    assert wall_s < 4, wall_s
    assert "did not complete" in res.output and "timeout after 1 s" in res.output


def test_a_models_reply_trickling_forever_is_cut_at_timeout_s_in_one_line(tmp_path):
    with fake_server("trickle_models") as url:
        res, wall_s = _replay(url, _trace(tmp_path / "t.jsonl"), "--timeout-s", "1")
    assert wall_s < 4, wall_s
    line = _one_error_line(res, 1)
    assert "gave no usable answer within --timeout-s 1 s" in line


def test_a_garbage_reply_is_one_line_exit_2(tmp_path):
    with fake_server("garbage") as url:
        res, _ = _replay(url, _trace(tmp_path / "t.jsonl"))
    line = _one_error_line(res)
    assert "/v1/models answered something that is not a JSON object" in line and "OpenAI-compatible" in line


def test_chunks_that_are_json_but_not_completions_fail_the_request_not_the_replay(tmp_path):
    out = tmp_path / "out"
    with fake_server("bad_chunks") as url:
        res, _ = _replay(url, _trace(tmp_path / "t.jsonl", 2), "--out", str(out))
    assert res.exit_code == 1 and "Traceback" not in res.output
    reasons = pd.read_csv(out / "requests.csv")["reason"]
    assert reasons.str.contains("stream chunk is not a JSON object").all()


@pytest.mark.parametrize("url, words", [
    ("http://127.0.0.1:99999", "Port out of range"),
    ("ftp://127.0.0.1:21", "not an http(s) URL"),
    ("http://127.0.0.1:port", "unusable URL"),
    ("not a url", "not an http(s) URL"),
])
def test_an_unusable_url_is_one_line_exit_2(tmp_path, url, words):
    res = runner.invoke(app, ["replay", str(_trace(tmp_path / "t.jsonl")), "--endpoint", url])
    assert words in _one_error_line(res)


# ---- huge numbers -------------------------------------------------------------------------------------

HUGE = [
    ('{"arrival_s": 0, "prompt_tokens": 100000000000000000000000, "output_tokens": 4}', 1, "prompt_tokens",
     "1e+23 is above the limit of 2147483647"),
    ('{"arrival_s": 0, "prompt_tokens": 4, "output_tokens": 4}\n{"arrival_s": 1e308, "prompt_tokens": 4, '
     '"output_tokens": 4}', 2, "arrival_s", "1e+308 is above the limit of 1e+08"),
    ('{"arrival_s": 0, "prompt_tokens": 4, "output_tokens": 4, "max_tokens": 4294967296}', 1, "max_tokens",
     "4294967296 is above the limit"),
    ('{"arrival_s": 0, "prompt_tokens": 4, "output_tokens": 4, "session_id": "s", "think_s": 1e300}', 1,
     "think_s", "is above the limit of 1e+08"),
    ('{"arrival_s": 0, "prompt_tokens": 4, "output_tokens": 4, "prefix_blocks": [18446744073709551616]}', 1,
     "prefix_blocks.0", "less than or equal to 9223372036854775807"),
]


@pytest.mark.parametrize("text, line, field, words", HUGE)
def test_huge_numbers_are_the_same_one_line_error_in_trace_validate_run_and_stats(tmp_path, text, line, field, words):
    trace = tmp_path / "huge.jsonl"
    trace.write_text(text + "\n")
    seen = set()
    for args in (["trace", "validate", str(trace)], ["run", str(trace)], ["trace", "stats", str(trace)]):
        err = _one_error_line(runner.invoke(app, args))
        assert err.startswith(f"error: {trace}:{line}: {field}: ") and words in err, err
        seen.add(err)
    assert len(seen) == 1  # one validator: the same words from every command


def test_a_rate_scale_that_pushes_arrivals_past_the_horizon_is_an_error(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "prompt_tokens": 4, "output_tokens": 4}\n'
                     '{"arrival_s": 100, "prompt_tokens": 4, "output_tokens": 4}\n')
    err = _one_error_line(runner.invoke(app, ["run", str(trace), "--rate-scale", "1e-10"]))
    assert f"{trace}:2: arrival_s:" in err and "past the trace horizon" in err


# ---- conflicting options ------------------------------------------------------------------------------


@pytest.mark.parametrize("args, field", [
    (["trace", "gen", "-o", "{out}", "-n", "5", "--clients", "4", "--rate", "2"], "--clients"),
    (["trace", "gen", "-o", "{out}", "-n", "5", "--clients", "4"], "--clients"),
    (["trace", "gen", "-o", "{out}", "-n", "5", "--arrival", "closed", "--clients", "2", "--rate", "3"], "--rate"),
    (["trace", "gen", "-o", "{out}", "-n", "5", "--rate", "2", "--burstiness", "0.5"], "--burstiness"),
    (["run", "{trace}", "--concurrency", "2", "--rate-scale", "2"], "--rate-scale"),
    (["run", "{trace}", "--router", "least-kv"], "--router"),
    (["sweep", "{sweep}", "-o", "{out}", "--ray-address", "auto"], "--executor"),
    (["sweep", "{sweep}", "-o", "{out}", "--executor", "ray", "--ray-address", "auto", "--workers", "2"], "--workers"),
    (["plan", "--trace", "{trace}", "--hw", "h100-sxm", "--ttft-p90", "1s", "--target-rps", "1", "--resume"],
     "--resume"),
])
def test_conflicting_options_are_one_line_errors_not_silently_ignored(tmp_path, args, field):
    trace = _trace(tmp_path / "t.jsonl")
    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"trace: {trace}\nhw: h100-sxm\ngrid:\n  concurrency: [1]\n")
    args = [a.format(out=tmp_path / "o", trace=trace, sweep=sweep) for a in args]
    err = _one_error_line(runner.invoke(app, args))
    assert err.startswith(f"error: {field}: "), err
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_gen_clients_with_a_closed_loop_still_works(tmp_path):
    out = tmp_path / "g.jsonl"
    res = runner.invoke(app, ["trace", "gen", "-o", str(out), "-n", "6", "--arrival", "closed", "--clients", "3"])
    assert res.exit_code == 0, res.output
    assert len(out.read_text().splitlines()) == 6


if sys.platform == "win32":  # pragma: no cover - the fake server's behaviours assume POSIX sockets
    pytestmark = pytest.mark.skip("POSIX only")
