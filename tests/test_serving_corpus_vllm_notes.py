"""Issue 38, the vLLM family's worst held-out curves: what the corpus now records about how they were run.

- InferenceX's experimental token-position sweeps (8xH200, vLLM nightly): the builder lists, from each curve's
  own result files, where the sweep breaks load order (a shorter median TTFT at a higher concurrency of a
  fixed-length closed loop), and says how the harness reached the server.
- The RTX 4090 Mistral-7B curve (mushfiqrahman.dev): Output Tok/s / Req/s is the realised mean output, ~100
  tokens of the 128 requested, so the run stopped at EOS (ignore_eos false) and the replay scales to it.
- DigitalOcean's vLLM 0.14.1 rows: the client ran on the server's host (base_url http://localhost:8000).
- Together AI's MI350X gpt-oss-120b recipe runs: range_ratio 0.8 (the sweep driver's RANDOM_RANGE_RATIO), which
  the files' own E2E / TTFT / TPOT medians confirm (a typical output of 914-937 tokens, not the 512 of the
  blank ratio the rows used to carry, which the replay read as U[1, L]); the server flags are the recipe's.
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVING = ROOT / "benchmarks" / "serving"
sys.path.insert(0, str(SERVING))

from import_inferencex import check_range_ratio, closed_loop_anomalies, intake_at_peak  # noqa: E402

from sim.bench.corpus import engine_overrides, row_lengths, stated_means  # noqa: E402


def _rows(name: str) -> list[dict]:
    with open(SERVING / name, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _pt(ttft_s: float, tps: float) -> dict:
    return {"median_ttft": str(ttft_s), "output_throughput": str(tps)}


def test_anomalies_flag_a_shorter_ttft_at_higher_concurrency_only_past_the_margin():
    steady = {4: _pt(0.10, 100), 8: _pt(0.12, 190), 16: _pt(0.30, 300)}
    assert closed_loop_anomalies(steady) == []
    # 10% shorter at C 8: within the noise allowance; 50% shorter at C 16: flagged, with both figures
    out = closed_loop_anomalies({4: _pt(0.40, 100), 8: _pt(0.36, 190), 16: _pt(0.18, 300)})
    assert out == ["median TTFT 360 ms at C 8 but 180 ms at C 16"]
    # output throughput falling as C rises is listed too (reported, not judged)
    assert closed_loop_anomalies({4: _pt(0.1, 100), 8: _pt(0.2, 80)}) == ["output 100 tok/s at C 4 but 80 tok/s at C 8"]


def test_intake_at_peak_reads_the_highest_and_lowest_concurrency():
    pts = {4: {"request_throughput": "0.5", "median_tpot": "0.0136", "median_ttft": "0.9"},
           64: {"request_throughput": "7.75", "median_tpot": "0.0165", "median_ttft": "4.779"}}
    assert intake_at_peak(pts, 4096) == ("At C 64 the server took in 31,744 prompt tokens/s (request_throughput x ISL) "
                                         "with a median TPOT of 16.5 ms (13.6 ms at C 4) and a median TTFT of 4,779 ms.")


def test_experimental_qwen35_rows_carry_their_load_order_evidence_and_harness():
    rows = [r for r in _rows("inferencex.csv") if r["curve_id"] == "ix-h200-vllm-qwen3.5-397b-a17b-isl8192-osl128"]
    assert rows
    for r in rows:
        assert "median TTFT 6203 ms at C 4 but 3144 ms at C 8" in r["notes"]
        assert "new aiohttp session (connection) per request" in r["notes"]
        assert "At C 64 the server took in 5,398 prompt tokens/s" in r["notes"]
        assert "experimental WIP" in r["notes"]  # still the source's own label (never trains the front end)
        # the client's fixed --seed 0 repeats prompts across the sweep, and the server's prefix cache is on
        assert "--seed 0 (its default) in every run" in r["notes"] and "--enable-prefix-caching" in r["notes"]


def test_mushfiq_rows_state_the_realised_output_mean_and_no_ignore_eos():
    rows = [r for r in _rows("corpus_c.csv") if "mushfiqrahman" in r["curve_id"]]
    assert len(rows) == 25
    for r in rows:
        assert r["ignore_eos"] == "false"
        mi, mo = stated_means(r)
        assert mi == 256.0 and 99.0 < mo < 101.0  # e.g. 210 / 2.09 = 100.5 at C 4
    c4 = next(r for r in rows if r["max_concurrency"] == "4")
    ins, outs = row_lengths(c4, 32)
    assert set(ins.tolist()) == {256} and abs(outs.mean() - 100.5) < 1.0


@pytest.mark.parametrize("curve", ["vllm_independent-do-gtc2026-phase0-sharegpt-llama-3.1-70b-fp8-h200-tp1"])
def test_digitalocean_rows_say_the_client_sat_beside_the_server(curve):
    rows = [r for r in _rows("vllm_independent.csv") if r["curve_id"] == curve]
    assert rows and all("base_url='http://localhost:8000'" in r["notes"] for r in rows)


@pytest.mark.parametrize("tp", [1, 8])
def test_mi350x_recipe_rows_replay_range_ratio_0_8_and_the_recipe_flags(tp):
    curve = f"ix-together-mi350x-vllm-gpt-oss-120b-mxfp4-tp{tp}-isl1024-osl1024"
    rows = [r for r in _rows("inferencex.csv") if r["curve_id"] == curve]
    assert rows
    for r in rows:
        assert r["range_ratio"] == "0.8" and r["client"] == "custom" and r["ignore_eos"] == "true"
        assert "sweep.py run_one, sets RANDOM_RANGE_RATIO '0.8'" in r["notes"]
        assert "inside range_ratio 0.8's 819-1024" in r["notes"]
        ov = engine_overrides(r["engine_flags"], r["kv_cache_dtype"], r["tp"])
        assert ov["tp"] == tp and ov["prefix_caching"] is False and ov["block_size"] == 64
        assert ov["memory_fraction"] == 0.95
    ins, outs = row_lengths(rows[0], 400)
    # randint(int(0.8 L), L) on both sides: 819-1024, mean about 921.5 (the blank ratio gave U[1, 1024], ~512)
    assert ins.min() >= 819 and outs.max() <= 1024 and abs(outs.mean() - 921.5) < 15 and abs(ins.mean() - 921.5) < 15


def test_range_ratio_check_names_the_file_when_the_figures_imply_other_lengths():
    ok = {"median_e2el_ms": "4216.1", "median_ttft_ms": "44.8", "median_tpot_ms": "4.5416"}
    assert "919.5 output tokens, inside range_ratio 0.8's 819-1024" in check_range_ratio(ok, 1024, "0.8", Path("a.json"))
    # a run that decoded about 512 tokens (what U[1, L] gives) contradicts range_ratio 0.8
    half = {"median_e2el_ms": "2370", "median_ttft_ms": "45", "median_tpot_ms": "4.54"}
    with pytest.raises(SystemExit, match=r"b\.json: .* median output of 513 tokens, outside range_ratio 0\.8's 819-1024"):
        check_range_ratio(half, 1024, "0.8", Path("b.json"))
