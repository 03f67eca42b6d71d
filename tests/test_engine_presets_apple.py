"""Apple Silicon engine presets (mlx-lm's server, LM Studio) and their public-measurement corpus."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from sim.catalog.engine_config import load_engine
from sim.catalog.hardware import load_profile
from sim.catalog.lookup import get_model
from sim.catalog.quant import get_quant
from sim.cluster.simulate import simulate
from workloads.request import Request

ROOT = Path(__file__).resolve().parents[1]
MLX_CSV = ROOT / "benchmarks" / "public" / "mlx.csv"
APPLE = ["apple-m2-ultra", "apple-m3-max", "apple-m4-max"]
@pytest.mark.parametrize(("name", "alias"), [("mlx", "mlx-lm"), ("lmstudio", "lm-studio")])
def test_preset_resolves_through_its_alias(name, alias):
    # citations of every default: tests/test_engine_config.py (PRESETS includes both)
    engine = load_engine(name)
    assert any(s.url == "engineering-estimate" for s in engine.sources)
    assert engine.efficiency_scale.compute == engine.efficiency_scale.bandwidth == engine.efficiency_scale.attention == 1.0
    assert get_quant(engine.default_quant).name == "mlx-4bit"
    assert load_engine(alias) == engine
    assert load_engine(alias.upper()).name == name


def test_presets_follow_the_engines_sources():
    mlx, lms = load_engine("mlx"), load_engine("lmstudio")
    # mlx_lm.server: --decode-concurrency 32, --prompt-concurrency 8 x --prefill-step-size 2048, KVCache.step 256
    assert (mlx.scheduler, mlx.kv_allocator, mlx.block_size) == ("chunked", "paged", 256)
    assert (mlx.max_num_seqs, mlx.max_num_batched_tokens, mlx.context_size) == (32, 8 * 2048, None)
    # LM Studio: Max Concurrent Predictions 4, one 2048-token prompt chunk per tick, 4096-token context
    assert (lms.scheduler, lms.kv_allocator, lms.block_size) == ("chunked", "paged", 256)
    assert (lms.max_num_seqs, lms.max_num_batched_tokens, lms.context_size) == (4, 2048, 4096)


@pytest.mark.parametrize("name", ["mlx", "lmstudio"])
def test_short_simulation_runs_on_m4_max(name):
    hw = load_profile("apple-m4-max")
    engine = load_engine(name).for_hardware(hw)
    requests = [Request(str(i), 0.05 * i, 300 + 40 * i, 64, 64) for i in range(12)]
    result = simulate(requests, hw=hw, model=get_model("llama-3.1-8b"), quant=None, engine=engine,
                      check_invariants=True)
    summary = result.summary
    assert summary["requests"] == {"total": 12, "completed": 12, "rejected": 0}
    assert int(result.requests["output_tokens"].sum()) == 12 * 64
    assert summary["ttft_s"]["p50"] > 0 and summary["throughput"]["output_tok_s"] > 0
    # concurrent requests share decode steps, up to the preset's concurrency limit
    assert 1 < summary["batch_size"]["max"] <= engine.max_num_seqs


def _rows() -> list[dict[str, str]]:
    with MLX_CSV.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_mlx_corpus_rows_cite_a_source_and_name_a_known_engine_device_model_and_quant():
    rows = _rows()
    assert len(rows) >= 40
    header = (ROOT / "benchmarks" / "public" / "apple.csv").read_text(encoding="utf-8").splitlines()[0]
    assert MLX_CSV.read_text(encoding="utf-8").splitlines()[0] == header
    assert len({r["row_id"] for r in rows}) == len(rows)
    for r in rows:
        assert r["source"].strip().startswith("https://"), r["row_id"]
        assert r["engine"] in {"mlx", "lmstudio", "llama.cpp"}, r["row_id"]
        assert r["device"] in APPLE, r["row_id"]
        assert r["as_printed"].strip(), r["row_id"]
        get_model(r["model"])
        get_quant(r["quant"])
        assert float(r["value"]) > 0
        if r["engine"] == "lmstudio":
            assert "runtime=mlx" in r["settings"] or "runtime=llama.cpp" in r["settings"], r["row_id"]
