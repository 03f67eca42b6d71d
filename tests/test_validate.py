"""`infersim validate`: a real replay and the simulation of the same trace, side by side."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from tiny_model import free_loopback_port, llama_server, requires_llama_cpp, tiny_gguf  # noqa: F401
from typer.testing import CliRunner

from calibrate.replay.compare import METRICS, compare, simulated_trace
from calibrate.replay.records import ReplayResult, RequestRecord
from sim.cli import app
from workloads.request import Request

runner = CliRunner()
LABELS = [m[0] for m in METRICS]
HW = "cpu-x86-generic"


def _trace(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"arrival_s": 0.02 * i, "prompt_tokens": 30 + 9 * i,
                                        "output_tokens": 8 + 2 * i}) + "\n" for i in range(n)))
    return path


def test_compare_reports_signed_error_relative_to_measured_and_flags_targets():
    measured = {"throughput": {"output_tok_s": 100.0}, "ttft_s": {"p50": 0.2}, "e2e_s": {"p50": None}}
    predicted = {"throughput": {"output_tok_s": 104.0}, "ttft_s": {"p50": 0.1}, "e2e_s": {"p50": 1.0}}
    rows = {r.metric: r for r in compare(measured, predicted)}
    assert [r for r in LABELS] == list(rows)
    assert rows["throughput"].error_pct == pytest.approx(4.0) and rows["throughput"].within_target
    assert rows["TTFT p50"].error_pct == pytest.approx(-50.0) and rows["TTFT p50"].within_target is False
    assert rows["TTFT p50"].measured == pytest.approx(200.0)  # shown in ms
    assert rows["e2e p50"].error_pct is None and rows["e2e p50"].within_target is None


def test_simulated_trace_uses_measured_lengths_and_drops_unfinished_requests():
    reqs = [Request(id="a", arrival_s=0.0, prompt_tokens=10, output_tokens=50, max_tokens=64),
            Request(id="b", arrival_s=1.0, prompt_tokens=10, output_tokens=5, max_tokens=5)]
    recs = (RequestRecord("a", 0.0, 12, 50, (0.1, 0.2, 0.3), 3, None, 0.3),  # stopped at 3 tokens
            RequestRecord("b", 1.0, 10, 5, (1.1,), 1, None, None, "failed", "lost"))
    sim = simulated_trace(ReplayResult(recs, {}), reqs)
    assert [(r.id, r.prompt_tokens, r.output_tokens, r.max_tokens) for r in sim] == [("a", 12, 3, 3)]


@requires_llama_cpp
def test_validate_local_end_to_end_measures_simulates_and_draws_cdfs(tiny_gguf, tmp_path):
    trace = _trace(tmp_path / "t.jsonl", 6)
    out, html = tmp_path / "v", tmp_path / "v.html"
    res = runner.invoke(app, ["validate", str(trace), "--hw", HW, "--engine", "llama.cpp", "--local", str(tiny_gguf),
                              "--concurrency", "2", "--threads", "1", "--json", "--out", str(out), "--html", str(html)])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert [m["metric"] for m in report["metrics"]] == LABELS
    assert all(m["measured"] is not None and m["predicted"] is not None for m in report["metrics"])
    lo, hi = next(m["predicted_band"] for m in report["metrics"] if m["metric"] == "e2e p50")  # ±5 % speed
    assert report["speed_margin"] == 0.05 and lo < hi
    # the simulated engine got the driver's real limits
    assert report["engine_overrides"] == {"max_num_seqs": 2, "max_num_batched_tokens": 512, "context_size": 512}
    assert report["predicted"]["config"]["scheduler"] == "slots"
    measured = json.loads((out / "measured" / "summary.json").read_text())
    assert measured["requests"]["completed"] == 6
    thr = next(m for m in report["metrics"] if m["metric"] == "throughput")
    assert thr["measured"] == pytest.approx(measured["throughput"]["output_tok_s"])
    pred = pd.read_csv(out / "predicted" / "requests.csv")
    meas = pd.read_csv(out / "measured" / "requests.csv")
    assert list(pred["output_tokens"]) == list(meas["output_tokens"])  # same work on both sides
    page = html.read_text()
    assert "plotly" in page and '"name":"measured"' in page and '"name":"predicted"' in page
    assert 'src="http' not in page and len(page) > 1_000_000  # plotly.js inlined: opens offline


@requires_llama_cpp
def test_validate_against_llama_cpp_server_reads_the_served_gguf_and_simulates_sequential(tiny_gguf, tmp_path):
    trace = _trace(tmp_path / "t.jsonl", 4)
    with llama_server(tiny_gguf, extra_args=("--interrupt_requests", "False", "--n_threads", "1")) as url:
        res = runner.invoke(app, ["validate", str(trace), "--hw", HW, "--engine", "llama.cpp", "--endpoint", url,
                                  "--scheduler", "sequential", "--max-seqs", "1", "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["model"] == "tiny" and report["scheduler"] == "sequential"
    assert report["measured"]["config"]["server"] == "llama-cpp-python"
    assert report["measured"]["requests"]["completed"] == 4


def test_validate_with_unknown_hardware_exits_2_before_measuring(tmp_path):
    trace = _trace(tmp_path / "t.jsonl", 2)
    url = f"http://127.0.0.1:{free_loopback_port()}"  # nothing listens: measuring first would exit 1
    res = runner.invoke(app, ["validate", str(trace), "--hw", "no-such-machine", "--engine", "llama.cpp",
                              "--endpoint", url, "--model", "llama-3.1-8b"])
    assert res.exit_code == 2
    assert "no-such-machine" in res.output


def test_validate_with_unreachable_engine_exits_1_with_the_reason(tmp_path):
    trace = _trace(tmp_path / "t.jsonl", 2)
    url = f"http://127.0.0.1:{free_loopback_port()}"
    res = runner.invoke(app, ["validate", str(trace), "--hw", HW, "--engine", "llama.cpp", "--endpoint", url,
                              "--model", "llama-3.1-8b"])
    assert res.exit_code == 1
    assert "engine unreachable: cannot connect to" in res.output


def _served(reqs, speedup: float = 1.0) -> ReplayResult:
    """A made-up measurement of `reqs`: every request completed, one token every 20 ms after 100 ms."""
    recs = []
    for r in reqs:
        t = tuple(r.arrival_s + (0.1 + 0.02 * k) / speedup for k in range(r.output_tokens))
        recs.append(RequestRecord(r.id, r.arrival_s, r.prompt_tokens, r.output_tokens, t, r.output_tokens,
                                  r.arrival_s, t[-1]))
    return ReplayResult(tuple(recs), {"target": "endpoint", "server": "test"})


def _poisson(n: int, rate: float) -> list[Request]:
    import numpy as np

    rng = np.random.default_rng(1)
    t = np.cumsum(rng.exponential(1.0 / rate, n))
    return [Request(str(i), float(t[i]), 200, 40, 40) for i in range(n)]


def test_the_speed_band_is_the_prediction_on_a_faster_and_a_slower_machine():
    from calibrate.replay.validate import run_validation

    reqs = [Request(str(i), 0.0, 100 + 10 * i, 20, 20) for i in range(6)]
    closed = run_validation(reqs, hw=HW, engine="llama.cpp", model="gemma-3-270m", concurrency=2,
                            replay=_served, speed_margin=0.1)
    for r in closed.rows:  # closed loop: the band is the prediction scaled, nothing else moves
        lo, hi = (r.predicted / 1.1, r.predicted / 0.9) if r.unit == "tok/s" else (r.predicted * 0.9, r.predicted * 1.1)
        assert r.band == pytest.approx((lo, hi), rel=1e-9), r.metric
    assert closed.as_dict()["metrics"][0]["predicted_band"] == list(closed.rows[0].band)
    # open loop near capacity: a few % of speed moves the queue, so latency moves by more than that
    seq = {"scheduler": "sequential", "max_num_seqs": 1}
    one = run_validation(_poisson(20, 1.0), hw=HW, engine="llama.cpp", model="gemma-3-270m", concurrency=1,
                         overrides=seq, replay=_served, speed_margin=0)
    rate = 0.9 * one.rows[0].predicted / 40  # 0.9 x the requests/s one request at a time sustains (40 tokens each)
    opened = run_validation(_poisson(60, rate), hw=HW, engine="llama.cpp", model="gemma-3-270m",
                            overrides=seq, replay=_served,
                            speed_margin=0.05)
    e2e = next(r for r in opened.rows if r.metric == "e2e p50")
    assert e2e.band[0] < e2e.predicted < e2e.band[1]
    assert e2e.band[1] / e2e.predicted - 1 > 0.05 + 0.01  # amplified past the 5 % of speed
    none = run_validation(reqs, hw=HW, engine="llama.cpp", model="gemma-3-270m", concurrency=2, replay=_served,
                          speed_margin=0)
    assert all(r.band is None for r in none.rows) and "predicted_band" not in none.as_dict()["metrics"][0]


def test_a_speed_margin_out_of_range_is_refused_before_measuring(tmp_path):
    trace = _trace(tmp_path / "t.jsonl", 2)
    url = f"http://127.0.0.1:{free_loopback_port()}"  # nothing listens: measuring first would exit 1
    res = runner.invoke(app, ["validate", str(trace), "--hw", HW, "--engine", "llama.cpp", "--endpoint", url,
                              "--model", "llama-3.1-8b", "--speed-margin", "0.7"])
    assert res.exit_code == 2 and "--speed-margin" in res.output
