"""`infersim bench serve`: vLLM's flags parsed as vLLM parses them, its JSON keys, its metric
definitions, its arrival process and semaphore, replayed on the simulator."""

from __future__ import annotations

import heapq
import json
import math
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from sim.bench.serve import (Deployment, ServeClient, make_workload, release_times, result_json, run_client,
                             sample_random)
from sim.cli import app
from sim.commands.bench import build_parser, client_from_args

runner = CliRunner()
DEP = Deployment(hw="h100-sxm", model="llama-3.1-8b", engine="vllm")


def _client(*args: str) -> ServeClient:
    from sim.commands.bench import _flexible

    return client_from_args(build_parser().parse_args(_flexible(list(args))))


# ---- flags -----------------------------------------------------------------------------------------------
def test_flags_default_to_vllms_defaults():
    c = _client()
    assert c.request_rate == math.inf and c.burstiness == 1.0 and c.num_prompts == 1000
    assert (c.random_input_len, c.random_output_len, c.random_range_ratio, c.random_prefix_len) == (1024, 128, 0.0, 0)
    assert c.percentile_metrics == ("ttft", "tpot", "itl") and c.metric_percentiles == (99.0,)
    assert c.max_concurrency is None and c.seed == 0 and c.dataset_name == "random"
    assert c.ignore_eos  # vLLM forces it for the random dataset


def test_flags_parse_as_vllm_parses_them():
    # argparse float("inf"), FlexibleArgumentParser's underscores, --input-len/--output-len mapping
    c = _client("--request_rate", "inf", "--max-concurrency=8", "--input-len", "512", "--output-len", "64",
                "--metric-percentiles", "50,90,99.9", "--percentile-metrics", "ttft,e2el", "--goodput", "ttft:200",
                "tpot:20", "--burstiness", "0.5", "--host", "10.0.0.1", "--port", "8001", "--temperature", "0")
    assert c.request_rate == math.inf and c.max_concurrency == 8
    assert (c.random_input_len, c.random_output_len, c.sharegpt_output_len) == (512, 64, 64)
    assert c.metric_percentiles == (50.0, 90.0, 99.9) and c.percentile_metrics == ("ttft", "e2el")
    assert dict(c.goodput) == {"ttft": 200.0, "tpot": 20.0} and c.burstiness == 0.5


@pytest.mark.parametrize("args, needle", [
    (["--request-rate", "abc"], "--request-rate"),
    (["--max-concurrency", "0"], "--max-concurrency"),
    (["--max-concurrency", "2.5"], "--max-concurrency"),
    (["--num-prompts", "0"], "--num-prompts"),
    (["--random-range-ratio", "1.0"], "--random-range-ratio"),
    (["--burstiness", "0"], "--burstiness"),
    (["--request-rate", "-1"], "--request-rate"),
    (["--percentile-metrics", "ttft,foo"], "--percentile-metrics"),
    (["--metric-percentiles", "99,x"], "--metric-percentiles"),
    (["--dataset-name", "sharegpt"], "--dataset-path"),
    (["--dataset-name", "sonnet"], "--dataset-name"),
    (["--goodput", "ttft=5"], "--goodput"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "5", "--request-rate", "3"],
     "--request-rate"),
    (["--no-such-flag"], "unrecognized arguments"),
    (["--hw", "no-such-gpu", "--num-prompts", "4"], "no-such-gpu"),
])
def test_bad_values_are_one_line_and_exit_2(args, needle):
    res = runner.invoke(app, ["bench", "serve", *args])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], res.output
    assert "Traceback" not in res.output


def test_help_lists_vllms_flags():
    res = runner.invoke(app, ["bench", "serve", "--help"])
    assert res.exit_code == 0
    for flag in ("--request-rate", "--burstiness", "--max-concurrency", "--random-range-ratio", "--percentile-metrics",
                 "--hw", "--max-seqs", "--kv-dtype", "--client"):
        assert flag in res.output


# ---- the dataset and the arrivals -------------------------------------------------------------------------
def test_random_lengths_are_vllms_draws_with_its_range_semantics():
    c = ServeClient(num_prompts=2000, random_input_len=1000, random_output_len=100, random_range_ratio=0.5, seed=3)
    ins, outs = sample_random(c)
    # vLLM's get_sampling_params: integers in [floor(I(1-r)), ceil(I(1+r))], default_rng(seed), inputs first
    rng = np.random.default_rng(3)
    assert np.array_equal(ins, rng.integers(500, 1501, size=2000))
    assert np.array_equal(outs, rng.integers(50, 151, size=2000))
    assert ins.min() >= 500 and ins.max() <= 1500 and ins.min() < 520 and ins.max() > 1480
    fixed = sample_random(ServeClient(num_prompts=10))
    assert set(fixed[0]) == {1024} and set(fixed[1]) == {128}
    wl = make_workload(ServeClient(num_prompts=4, random_prefix_len=100))
    assert set(wl.prompt_lens) == {1124} and wl.prefix_tokens == 100


def test_arrivals_are_vllms_gamma_draws_rescaled_to_n_over_rate():
    c = ServeClient(num_prompts=50, request_rate=4.0, burstiness=0.5, seed=7)
    np.random.seed(7)  # vllm/benchmarks/serve.py get_request, written out as vLLM runs it
    delays = [np.random.gamma(shape=0.5, scale=1.0 / (4.0 * 0.5)) for _ in range(50)]
    cum = np.cumsum(delays)
    assert np.allclose(release_times(c, 50), cum * (50 / 4.0) / cum[-1], rtol=0, atol=1e-12)
    assert release_times(c, 50)[-1] == pytest.approx(12.5)
    assert not release_times(ServeClient(num_prompts=5), 5).any()  # inf: all at t = 0


# ---- a run: JSON keys and metric definitions ----------------------------------------------------------------
VLLM_KEYS = ["date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts", "request_rate",
             "burstiness", "max_concurrency", "duration", "completed", "failed", "total_input_tokens",
             "total_output_tokens", "request_throughput", "request_goodput", "output_throughput",
             "total_token_throughput", "input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times",
             "queue_times", "generated_texts", "errors", "max_output_tokens_per_s", "max_concurrent_requests", "rtfx",
             "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
             "std_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "std_itl_ms", "p99_itl_ms"]


def test_saved_json_has_vllms_keys_in_vllms_order(tmp_path):
    res = runner.invoke(app, ["bench", "serve", "--num-prompts", "12", "--max-concurrency", "4", "--save-result",
                              "--save-detailed", "--result-dir", str(tmp_path), "--label", "sim"])
    assert res.exit_code == 0, res.output
    assert "============ Serving Benchmark Result ============" in res.output
    for line in ("Successful requests:", "Benchmark duration (s):", "Total input tokens:", "Mean TTFT (ms):",
                 "Median TTFT (ms):", "P99 TTFT (ms):", "Mean TPOT (ms):", "P99 ITL (ms):"):
        assert line in res.output
    files = list(tmp_path.glob("sim-infqps-concurrency4-llama-3.1-8b-*.json"))  # vLLM's file name
    assert len(files) == 1
    data = json.loads(files[0].read_text())
    keys = [k for k in data if k not in ("infersim", "client_queue_time") and not k.endswith("client_queue_time_ms")]
    assert keys == VLLM_KEYS
    assert data["request_rate"] == "inf" and data["max_concurrency"] == 4 and data["infersim"]["simulated"] is True
    assert len(data["itls"]) == 12 and all(len(x) == 127 for x in data["itls"])
    # without --save-detailed vLLM drops the per-request arrays (keeps latencies and queue times)
    res = runner.invoke(app, ["bench", "serve", "--num-prompts", "4", "--save-result", "--result-filename",
                              str(tmp_path / "plain.json")])
    plain = json.loads((tmp_path / "plain.json").read_text())
    assert res.exit_code == 0 and "latencies" in plain
    assert not {"input_lens", "output_lens", "ttfts", "itls", "start_times", "generated_texts", "errors"} & set(plain)


def test_metrics_match_a_hand_computation_on_a_tiny_run():
    c = ServeClient(num_prompts=5, request_rate=20.0, max_concurrency=2, random_input_len=300, random_output_len=6,
                    random_range_ratio=0.5, percentile_metrics=("ttft", "tpot", "itl", "e2el"),
                    metric_percentiles=(50.0, 90.0), goodput={"ttft": 1e6})
    r = run_client(c, DEP, date="t")
    t = r["_timings"]
    ttft = t.first_token_s - t.start_s
    lat = t.finish_s - t.start_s
    outs = t.output_lens
    tpot = (lat - ttft) / (outs - 1)
    itl = np.concatenate(t.itls)
    dur = t.finish_s.max()  # from the benchmark's start (t = 0) to the last response
    assert r["duration"] == pytest.approx(dur)
    assert r["completed"] == 5 and r["total_output_tokens"] == outs.sum()
    assert r["request_throughput"] == pytest.approx(5 / dur)
    assert r["output_throughput"] == pytest.approx(outs.sum() / dur)
    assert r["total_token_throughput"] == pytest.approx((outs.sum() + t.prompt_lens.sum()) / dur)
    assert r["request_goodput"] == pytest.approx(5 / dur)
    assert r["mean_ttft_ms"] == pytest.approx(ttft.mean() * 1e3)
    assert r["median_ttft_ms"] == pytest.approx(np.median(ttft) * 1e3)
    assert r["std_ttft_ms"] == pytest.approx(ttft.std() * 1e3)
    assert r["p90_ttft_ms"] == pytest.approx(np.percentile(ttft, 90) * 1e3)
    assert r["mean_tpot_ms"] == pytest.approx(tpot.mean() * 1e3)
    assert r["mean_itl_ms"] == pytest.approx(itl.mean() * 1e3)
    assert r["p50_itl_ms"] == pytest.approx(np.median(itl) * 1e3)
    assert r["mean_e2el_ms"] == pytest.approx(lat.mean() * 1e3)
    for i in range(5):  # one token per engine step: output - 1 gaps that add up to the decode time
        assert len(t.itls[i]) == outs[i] - 1
        assert t.itls[i].sum() == pytest.approx(lat[i] - ttft[i])
    assert r["ttfts"] == pytest.approx(list(ttft))


def test_ttft_counts_from_the_send_and_the_semaphore_caps_what_is_in_flight():
    c = ServeClient(num_prompts=12, request_rate=50.0, max_concurrency=3, random_input_len=2000,
                    random_output_len=40, random_range_ratio=0.5, seed=1)
    t = run_client(c, DEP, date="t")["_timings"]
    # asyncio.Semaphore(3), written out: the next released request takes the first slot free
    free = [0.0, 0.0, 0.0]
    for i in np.argsort(t.release_s, kind="stable"):
        slot = heapq.heappop(free)
        assert t.start_s[i] == pytest.approx(max(t.release_s[i], slot))
        heapq.heappush(free, t.finish_s[i])
    assert (t.start_s > t.release_s + 1e-9).any()  # some waited for a slot: client queueing, not in TTFT
    events = sorted([(s, 1) for s in t.start_s] + [(f, -1) for f in t.finish_s], key=lambda e: (e[0], e[1]))
    assert max(np.cumsum([d for _, d in events])) <= 3


def test_a_single_request_gives_the_simulators_own_ttft_and_tpot():
    from sim.api import make_spec, resolve
    from sim.catalog import cache
    from sim.cluster.simulate import simulate
    from workloads.request import Request

    r = run_client(ServeClient(num_prompts=1, random_input_len=700, random_output_len=33), DEP, date="t")
    hw, eng = resolve(make_spec(trace="x"))
    s = simulate([Request("0", 0.0, 700, 33, 33)], hw=hw, model=cache.model("llama-3.1-8b"), quant=None,
                 engine=eng).summary
    assert r["mean_ttft_ms"] == pytest.approx(s["ttft_s"]["mean"] * 1e3)
    assert r["mean_tpot_ms"] == pytest.approx(s["tpot_s"]["mean"] * 1e3)
    assert r["mean_itl_ms"] == pytest.approx(s["itl_s"]["mean"] * 1e3, rel=1e-9)


def test_same_seed_same_numbers_and_the_seed_moves_the_arrivals():
    c = ServeClient(num_prompts=20, request_rate=8.0, random_range_ratio=0.3)
    a, b = result_json(run_client(c, DEP, date="t")), result_json(run_client(c, DEP, date="t"))
    assert a == b
    d = result_json(run_client(ServeClient(num_prompts=20, request_rate=8.0, random_range_ratio=0.3, seed=1), DEP,
                               date="t"))
    assert d["mean_ttft_ms"] != a["mean_ttft_ms"]


def test_engine_options_reach_the_simulated_server():
    slow = runner.invoke(app, ["bench", "serve", "--num-prompts", "16", "--max-seqs", "1", "--json"])
    fast = runner.invoke(app, ["bench", "serve", "--num-prompts", "16", "--json"])
    assert slow.exit_code == 0 and fast.exit_code == 0
    s, f = json.loads(slow.output), json.loads(fast.output)
    assert s["infersim"]["overrides"] == {"max_num_seqs": 1} and s["infersim"]["max_num_seqs"] == 1
    assert s["mean_ttft_ms"] > 3 * f["mean_ttft_ms"]  # one at a time: the queue waits


def test_sharegpt_lengths_are_estimated_and_filtered_like_vllm(tmp_path):
    convs = [{"conversations": [{"from": "human", "value": "x" * (40 + 8 * i)}, {"from": "gpt", "value": "y" * 80}]}
             for i in range(30)] + [{"conversations": [{"value": "too short"}]}]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(convs))
    c = ServeClient(dataset_name="sharegpt", dataset_path=str(path), num_prompts=40)
    wl = make_workload(c)
    assert len(wl) == 40 and wl.tokens_estimated  # 30 kept, oversampled to 40
    assert set(wl.output_lens) == {20} and wl.prompt_lens.min() >= 10
    res = runner.invoke(app, ["bench", "serve", "--dataset-name", "sharegpt", "--dataset-path", str(path),
                              "--num-prompts", "8"])
    assert res.exit_code == 0 and "Successful requests:                     8" in res.output


def test_bench_serve_runs_as_a_subprocess(tmp_path):
    out = subprocess.run([sys.executable, "-m", "sim.cli", "bench", "serve", "--num-prompts", "6", "--request-rate",
                          "3", "--save-result", "--result-filename", str(tmp_path / "r.json")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Request rate configured (RPS):           3.00" in out.stdout
    assert json.loads((tmp_path / "r.json").read_text())["completed"] == 6


def test_token_gaps_rebuilt_per_request_agree_with_the_simulators_own_gap_log():
    # a loaded open loop (prefills interleaved with decodes, fast-forwarded runs split into steps)
    c = ServeClient(num_prompts=200, request_rate=25.0, random_input_len=2048, random_output_len=128,
                    random_range_ratio=0.5)
    r = run_client(c, DEP, date="t")
    gaps = r["_timings"].summary["itl_s"]  # exact order statistics of every gap (sim.engine.metrics)
    assert r["mean_itl_ms"] == pytest.approx(gaps["mean"] * 1e3, rel=1e-9)
    assert r["median_itl_ms"] == pytest.approx(gaps["p50"] * 1e3, rel=0.01)
    assert r["p99_itl_ms"] == pytest.approx(gaps["p99"] * 1e3, rel=0.01)


def test_release_times_follow_each_client_lineage():
    """Today's vLLM rescales its gamma gaps so n requests span n / rate; SGLang's bench_serving (and the
    older benchmark_serving.py lineage) yields a request, then sleeps an exponential gap, unscaled."""
    from sim.bench.datasets import release_times

    n, rate = 400, 4.0
    v = release_times(ServeClient(num_prompts=n, request_rate=rate, seed=3), n)
    s = release_times(ServeClient(num_prompts=n, request_rate=rate, seed=3, range_mode="sglang"), n)
    assert v[-1] == pytest.approx(n / rate)
    assert s[0] == 0.0 and s[-1] != pytest.approx(n / rate)
    gaps = np.diff(s)
    assert np.all(gaps > 0) and np.mean(gaps) == pytest.approx(1 / rate, rel=0.15)
    # the same draws: vLLM's i-th release is SGLang's (i+1)-th times one scale factor
    ratio = v[:-1] / s[1:]
    assert np.allclose(ratio, ratio[0])


def test_serving_fit_rate_points_are_released_by_the_clients_rule():
    from calibrate.serving.rows import load_points
    from sim.bench.datasets import release_times

    row = {"row_id": "r1", "curve_id": "c", "source": "s", "publisher": "p", "engine": "sglang",
           "engine_version": "0.4.0", "device": "h100-sxm", "model": "llama-3.1-8b", "quant": "bf16", "tp": "1",
           "kv_cache_dtype": "", "client": "sglang-bench-serving", "dataset": "random", "input_tokens": "512",
           "output_tokens": "64", "range_ratio": "1", "num_prompts": "50", "load_kind": "rate",
           "request_rate": "2", "max_concurrency": "", "burstiness": "1.0", "quantity": "ttft_ms",
           "statistic": "median", "value": "50", "notes": "", "engine_flags": ""}
    (p,) = load_points([row], catalog={"llama-3.1-8b"})
    want = release_times(ServeClient(num_prompts=p.replayed_prompts, request_rate=2.0, range_mode="sglang"),
                         p.replayed_prompts)
    assert p.release_s == [round(float(x), 6) for x in want]
