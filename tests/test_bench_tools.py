"""AIPerf / genai-perf and GuideLLM replayed on the simulator, and result files read back
(`infersim validate --measured`)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

from sim.bench.results import predict, read_results
from sim.bench.serve import Deployment, ServeClient, result_json, run_client
from sim.bench.tools import aiperf_records, run_aiperf, run_guidellm
from sim.cli import app

runner = CliRunner()
DEP = Deployment(hw="h100-sxm", model="llama-3.1-8b", engine="vllm")
VALIDATE = ["--hw", "h100-sxm", "--engine", "vllm", "--model", "llama-3.1-8b"]


def test_a_replayed_closed_loop_drops_the_warm_up():
    # one constant front-end delay (front_jitter 0): each request's own delay (tests/test_front_jitter.py) follows its
    # id, and the warm-up shifts the profiling requests' ids, so only then are the two runs' requests alike
    dep = Deployment(hw="h100-sxm", model="llama-3.1-8b", engine="vllm", overrides={"front_jitter": 0.0})
    c = ServeClient(num_prompts=16, max_concurrency=4, random_input_len=512, random_output_len=32, num_warmups=8)
    export, t = run_aiperf(c, dep)
    assert export["request_count"]["avg"] == 16 and len(t.success) == 16  # the 8 warm-up requests are not counted
    assert export["input_config"]["loadgen"]["warmup_request_count"] == 8
    # profiling starts once the warm-up's responses are in: its first send is after t = 0 ...
    assert t.start_s.min() > 0
    # ... and its window, TTFTs and throughput are those of the 16 profiling requests alone
    cold, _ = run_aiperf(ServeClient(num_prompts=16, max_concurrency=4, random_input_len=512, random_output_len=32),
                         dep)
    assert export["benchmark_duration"]["avg"] == pytest.approx(t.finish_s.max() - t.start_s.min())
    assert export["time_to_first_token"]["avg"] == pytest.approx(cold["time_to_first_token"]["avg"], rel=1e-9)
    assert export["output_token_throughput"]["avg"] == pytest.approx(16 * 32 / export["benchmark_duration"]["avg"])
    # counting the warm-up would change the figures: 24 requests and a longer window
    whole, _ = run_aiperf(ServeClient(num_prompts=24, max_concurrency=4, random_input_len=512, random_output_len=32),
                          dep)
    assert whole["request_count"]["avg"] == 24 != export["request_count"]["avg"]


def test_aiperf_metrics_follow_its_definitions():
    c = ServeClient(num_prompts=10, max_concurrency=3, random_input_len=400, random_output_len=20,
                    random_range_ratio=0.5)
    export, t = run_aiperf(c, DEP)
    ttft = (t.first_token_s - t.start_s) * 1e3
    lat = (t.finish_s - t.start_s) * 1e3
    itl = (lat - ttft) / (t.output_lens - 1)  # per request, vLLM's TPOT
    assert export["time_to_first_token"]["avg"] == pytest.approx(ttft.mean())
    assert export["time_to_first_token"]["p90"] == pytest.approx(np.percentile(ttft, 90))
    assert export["inter_token_latency"]["p50"] == pytest.approx(np.median(itl))
    assert export["output_token_throughput_per_user"]["avg"] == pytest.approx((1e3 / itl).mean())
    assert export["request_throughput"]["avg"] == pytest.approx(10 / (t.finish_s.max() - t.start_s.min()))
    assert set(export) >= {"request_latency", "output_sequence_length", "input_sequence_length", "total_osl"}


def test_guidellm_sweep_runs_synchronous_throughput_then_interpolated_rates():
    res = run_guidellm(ServeClient(num_prompts=12, random_input_len=256, random_output_len=16), DEP, profile="sweep",
                       rates=(5,))
    kinds = [b["config"]["strategy"]["type_"] for b in res["benchmarks"]]
    assert kinds == ["synchronous", "throughput", "constant", "constant", "constant"]
    rps = [b["metrics"]["requests_per_second"]["successful"]["mean"] for b in res["benchmarks"]]
    # guidellm profiles/sweep.py: np.linspace(sync, throughput, sweep_size - 1)[1:]
    want = list(np.linspace(rps[0], rps[1], 4))[1:]
    assert [b["config"]["strategy"]["rate"] for b in res["benchmarks"][2:]] == pytest.approx(want)
    sync = res["benchmarks"][0]["metrics"]
    # GuideLLM's time per output token counts the first token; its ITL does not
    assert sync["time_per_output_token_ms"]["successful"]["mean"] > sync["inter_token_latency_ms"]["successful"]["mean"]


def test_cli_writes_each_tools_files(tmp_path):
    res = runner.invoke(app, ["bench", "serve", "--client", "aiperf", "--num-prompts", "8", "--max-concurrency", "2",
                              "--num-warmups", "2", "--result-dir", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    assert {p.name for p in (tmp_path / "a").iterdir()} == {"profile_export_aiperf.json", "profile_export_aiperf.csv",
                                                              "profile_export.jsonl"}
    csv_text = (tmp_path / "a" / "profile_export_aiperf.csv").read_text()
    assert csv_text.startswith("Metric,avg,min,max,p1,p5,p10,p25,p50,p75,p90,p95,p99,std\n")
    assert len((tmp_path / "a" / "profile_export.jsonl").read_text().splitlines()) == 8
    res = runner.invoke(app, ["bench", "serve", "--client", "genai-perf", "--request-count", "4", "--concurrency", "2",
                              "--isl", "300", "--osl", "20", "--result-dir", str(tmp_path / "g")])  # AIPerf's names
    assert res.exit_code == 0 and (tmp_path / "g" / "profile_export_genai_perf.json").is_file()
    g = json.loads((tmp_path / "g" / "profile_export_genai_perf.json").read_text())
    assert g["input_config"]["concurrency"] == 2 and g["input_config"]["request_count"] == 4
    assert g["input_sequence_length"]["avg"] == 300 and g["output_sequence_length"]["avg"] == 20
    res = runner.invoke(app, ["bench", "serve", "--client", "guidellm", "--guidellm-profile", "concurrent",
                              "--guidellm-rate", "1,4", "--num-prompts", "8", "--result-dir", str(tmp_path / "l")])
    assert res.exit_code == 0, res.output
    assert len(json.loads((tmp_path / "l" / "benchmarks.json").read_text())["benchmarks"]) == 2


# ---- reading result files back -----------------------------------------------------------------------------
def _write_all(tmp_path):
    """One result file per tool, written by the simulator itself."""
    c = ServeClient(num_prompts=10, max_concurrency=4, random_input_len=600, random_output_len=24,
                    random_range_ratio=0.4, percentile_metrics=("ttft", "tpot", "itl", "e2el"), num_warmups=4)
    v = tmp_path / "vllm.json"
    v.write_text(json.dumps(result_json(run_client(c, DEP, date="t"), detailed=True)))
    a = tmp_path / "aiperf" / "profile_export_aiperf.json"
    a.parent.mkdir()
    export, t = run_aiperf(c, DEP)
    a.write_text(json.dumps(export))
    # per-request lengths beside it, as AIPerf writes them (the replay then uses them, not the means)
    (a.parent / "profile_export.jsonl").write_text("".join(json.dumps(r) + "\n" for r in aiperf_records(t)))
    g = tmp_path / "benchmarks.json"
    g.write_text(json.dumps(run_guidellm(ServeClient(num_prompts=10, random_input_len=300, random_output_len=20), DEP,
                                         profile="constant", rates=(2.0, 6.0))))
    return v, a, g


def test_replaying_a_result_on_the_deployment_that_wrote_it_reproduces_it(tmp_path):
    for path in _write_all(tmp_path):
        points = read_results(path)
        assert points
        for p in points:
            pred = predict(p, DEP)
            assert p.measured and set(p.measured) <= set(pred)
            for m, v in p.measured.items():
                assert pred[m] == pytest.approx(v, rel=1e-6), (path.name, p.label, m)


def test_validate_measured_prints_measured_vs_predicted(tmp_path):
    v, a, g = _write_all(tmp_path)
    res = runner.invoke(app, ["validate", "--measured", str(v), "--hw", "h200", "--engine", "vllm", "--model",
                              "llama-3.1-8b", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)["rows"]
    by = {r["metric"]: r for r in rows}
    assert {"ttft_mean_ms", "tpot_mean_ms", "itl_mean_ms", "output_tps", "request_tps"} <= set(by)
    assert by["tpot_mean_ms"]["predicted"] < by["tpot_mean_ms"]["measured"]  # H200 decodes faster than H100
    assert by["tpot_mean_ms"]["error_pct"] == pytest.approx(
        (by["tpot_mean_ms"]["predicted"] / by["tpot_mean_ms"]["measured"] - 1) * 100)
    res = runner.invoke(app, ["validate", "--measured", str(g), *VALIDATE])
    assert res.exit_code == 0 and "constant 6" in res.output and "ttft_median_ms" in res.output


@pytest.mark.parametrize("tool, drops, field", [
    ("vllm", [["request_rate"]], "request_rate"),
    ("vllm", [["completed"], ["input_lens"], ["output_lens"]], "completed"),
    ("aiperf", [["input_config", "loadgen", "concurrency"], ["input_config", "loadgen", "request_rate"]],
     "input_config.loadgen.concurrency"),
    ("aiperf", [["output_sequence_length"]], "output_sequence_length.avg"),
    ("guidellm", [["benchmarks", 0, "metrics", "prompt_token_count"]], "benchmarks.0.metrics.prompt_token_count"),
])
def test_a_result_file_with_a_missing_field_is_one_line_naming_file_and_field(tmp_path, tool, drops, field):
    v, a, g = _write_all(tmp_path)
    path = {"vllm": v, "aiperf": a, "guidellm": g}[tool]
    (path.parent / "profile_export.jsonl").unlink(missing_ok=True)
    data = json.loads(path.read_text())
    for keys in drops:
        node = data
        for key in keys[:-1]:
            node = node[key]
        node.pop(keys[-1])
    path.write_text(json.dumps(data))
    res = runner.invoke(app, ["validate", "--measured", str(path), *VALIDATE])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and str(path) in lines[0] and field in lines[0], res.output


def test_validate_without_trace_or_measured_is_a_one_line_error(tmp_path):
    res = runner.invoke(app, ["validate", *VALIDATE])
    assert res.exit_code == 2 and "TRACE" in res.output
    res = runner.invoke(app, ["validate", "--measured", str(tmp_path / "none.json"), *VALIDATE])
    assert res.exit_code == 2 and "file not found" in res.output
    (tmp_path / "export.csv").write_text("Metric,avg\n")
    res = runner.invoke(app, ["validate", "--measured", str(tmp_path / "export.csv"), *VALIDATE])
    assert res.exit_code == 2 and "JSON beside it" in res.output
    (tmp_path / "junk.json").write_text("{not json")
    res = runner.invoke(app, ["validate", "--measured", str(tmp_path / "junk.json"), *VALIDATE])
    assert res.exit_code == 2 and "junk.json:1" in res.output and len(res.output.strip().splitlines()) == 1


# ---- a serving-corpus row ------------------------------------------------------------------------------------
ROW = dict(row_id="r1", client="vllm-bench-serve", device="h100-sxm", model="llama-3.1-8b", quant="bf16",
           engine="vllm", engine_flags="--max-num-seqs 64 --gpu-memory-utilization=0.95", kv_cache_dtype="auto",
           tp="1", dataset="random", input_tokens="512", output_tokens="64", range_ratio="", num_prompts="40",
           warmup="", load_kind="concurrency", max_concurrency="8", request_rate="", burstiness="")


def test_a_corpus_row_replays_its_client_at_its_load_point():
    from sim.bench.corpus import engine_overrides, point_from_row, predict_row

    assert engine_overrides("--max-num-seqs 512 --kv-cache-dtype fp8 -tp 2 --enable-prefix-caching", None, None) == \
        {"max_num_seqs": 512, "kv_dtype": "fp8", "tp": 2, "prefix_caching": True}
    # expert parallelism as vLLM and SGLang print it (issue 38: MiniMax-M2.5 TEP8 and --tp 8 --ep 8 were read as TP)
    assert engine_overrides("--tensor-parallel-size 8 --enable-expert-parallel --trust-remote-code") == \
        {"tp": 8, "expert_parallel": True}
    assert engine_overrides("--tp 8 --ep 8 --mem-fraction-static 0.85")["expert_parallel"] is True
    assert engine_overrides("--tp-size 4 --ep-size 1")["expert_parallel"] is False
    tool, client, dep = point_from_row(ROW)
    assert tool == "vllm" and client.max_concurrency == 8 and client.num_prompts == 40
    assert client.request_rate == float("inf") and dict(dep.overrides) == {"max_num_seqs": 64, "memory_fraction": 0.95,
                                                                          "tp": 1}
    v = predict_row(ROW)
    r = run_client(client, dep, date="t")
    assert v[("ttft_ms", "median")] == pytest.approx(r["median_ttft_ms"])
    assert v[("output_tps", "value")] == pytest.approx(r["output_throughput"])
    assert v[("tps_per_user", "value")] == pytest.approx(1000 / r["mean_tpot_ms"])
    assert point_from_row({**ROW, "range_ratio": "1.0"})[1].random_range_ratio == 0.0  # older vLLM: fixed lengths
    # SGLang's bench_serving: lengths in [I r, I]; its default r = 0 spreads them over [1, I]
    from sim.bench.serve import make_workload

    sg = make_workload(replace(point_from_row({**ROW, "client": "sglang-bench-serving"})[1], num_prompts=2000))
    assert sg.prompt_lens.min() < 20 and 490 < sg.prompt_lens.max() <= 512 and 230 < sg.prompt_lens.mean() < 280
    sg1 = point_from_row({**ROW, "client": "sglang-bench-serving", "range_ratio": "1"})[1]
    assert set(make_workload(sg1).prompt_lens) == {512}
    a = predict_row({**ROW, "client": "aiperf"})
    g = predict_row({**ROW, "client": "guidellm"})
    # one server, one load: the tools agree on TTFT; GuideLLM's TPOT counts the first token
    assert a[("ttft_ms", "mean")] == pytest.approx(v[("ttft_ms", "mean")])
    assert g[("tpot_ms", "mean")] > g[("itl_ms", "mean")]


def test_a_pasted_vllm_console_block_is_a_result_file(tmp_path):
    c = ServeClient(num_prompts=12, max_concurrency=4, request_rate=6.0, random_input_len=700, random_output_len=30,
                    percentile_metrics=("ttft", "tpot", "itl"))
    from sim.bench.serve import console_block

    r = run_client(c, DEP, date="t")
    text = "Traffic request rate: 6.0\nBurstiness factor: 1.0 (Poisson process)\n" + console_block(r, c)
    path = tmp_path / "pasted.txt"
    path.write_text("\n".join("# " + ln for ln in text.splitlines()))  # as pasted into a shell script
    (p,) = read_results(path)
    assert p.client.max_concurrency == 4 and p.client.request_rate == 6.0 and p.client.num_prompts == 12
    assert set(p.workload.prompt_lens) == {700} and set(p.workload.output_lens) == {30}
    assert p.measured["ttft_median_ms"] == pytest.approx(r["median_ttft_ms"], abs=0.005)
    pred = predict(p, DEP)  # same lengths, rate and seed: the printed figures come back (to the print's 2 decimals)
    for m in ("ttft_mean_ms", "tpot_mean_ms", "itl_p99_ms", "output_tps"):
        assert pred[m] == pytest.approx(p.measured[m], abs=0.01), m
    path.write_text(text.replace("Total generated tokens:", "Generated:"))
    res = runner.invoke(app, ["validate", "--measured", str(path), *VALIDATE])
    assert res.exit_code == 2 and str(path) in res.output and "Total generated tokens" in res.output


def test_ramp_up_varies_the_rate_and_skips_the_rescaling():
    from sim.bench.serve import release_times

    c = ServeClient(num_prompts=400, ramp_up_strategy="linear", ramp_up_start_rps=1, ramp_up_end_rps=20, seed=2)
    t = release_times(c, 400)
    early, late = np.diff(t[:100]).mean(), np.diff(t[-100:]).mean()
    assert early > 4 * late  # 1-5 req/s at the start, 15-20 at the end
    r = run_client(replace(c, num_prompts=20), DEP, date="t")
    assert r["ramp_up_strategy"] == "linear" and r["ramp_up_end_rps"] == 20


def test_an_appended_vllm_result_file_is_a_sweep(tmp_path):
    path = tmp_path / "sweep.json"
    for c in (1, 4, 16):
        res = runner.invoke(app, ["bench", "serve", "--num-prompts", "8", "--max-concurrency", str(c),
                                  "--random-input-len", "256", "--random-output-len", "16", "--append-result",
                                  "--result-filename", str(path)])
        assert res.exit_code == 0, res.output
    points = read_results(path)
    assert [p.client.max_concurrency for p in points] == [1, 4, 16]
    for p in points:
        assert predict(p, DEP)["ttft_mean_ms"] == pytest.approx(p.measured["ttft_mean_ms"], rel=1e-6)


def test_an_sglang_bench_serving_output_file_is_replayed_with_its_length_spread(tmp_path):
    c = ServeClient(num_prompts=30, max_concurrency=4, random_input_len=800, random_output_len=40,
                    random_range_ratio=0.5, range_mode="sglang", percentile_metrics=("ttft", "tpot", "itl", "e2el"))
    r = run_client(c, DEP, date="t")
    # the keys sglang.bench_serving writes (no num_prompts; total_throughput, mean_e2e_latency_ms)
    line = {"backend": "sglang", "dataset_name": "random", "request_rate": "inf", "max_concurrency": 4,
            "sharegpt_output_len": None, "random_input_len": 800, "random_output_len": 40, "random_range_ratio": 0.5,
            "duration": r["duration"], "completed": r["completed"], "total_input_tokens": r["total_input_tokens"],
            "total_output_tokens": r["total_output_tokens"], "request_throughput": r["request_throughput"],
            "output_throughput": r["output_throughput"], "total_throughput": r["total_token_throughput"],
            "mean_e2e_latency_ms": r["mean_e2el_ms"], "mean_ttft_ms": r["mean_ttft_ms"],
            "median_ttft_ms": r["median_ttft_ms"], "mean_tpot_ms": r["mean_tpot_ms"], "mean_itl_ms": r["mean_itl_ms"]}
    path = tmp_path / "sglang.jsonl"
    path.write_text(json.dumps(line) + "\n" + json.dumps({**line, "max_concurrency": 8}) + "\n")
    points = read_results(path)
    assert [p.tool for p in points] == ["sglang", "sglang"] and points[1].client.max_concurrency == 8
    p = points[0]
    assert p.client.range_mode == "sglang" and p.workload.prompt_lens.min() >= 400 and p.workload.prompt_lens.max() <= 800
    pred = predict(p, DEP)  # same draws ([I r, I], seed 0): the file's figures come back
    for m in ("ttft_mean_ms", "tpot_mean_ms", "e2el_mean_ms", "output_tps", "total_tps"):
        assert pred[m] == pytest.approx(p.measured[m], rel=1e-9), m
