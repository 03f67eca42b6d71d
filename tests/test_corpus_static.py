"""`predict_row` prices a static-batch tool's row (llama-batched-bench, vLLM's benchmark_latency, TensorRT-LLM's
emulated static batching) and a speculative row with stated acceptance by the serving fit's own rules, now in sim
(sim.bench.corpus STATIC_BATCH / static_batch, sim.bench.corpus_spec): each prediction is the serving fit's replay
of the same load point (calibrate/serving/rows.load_points + replay), computed here, and a row it cannot price
still says why in one line."""
from __future__ import annotations

import dataclasses
import math

import pytest

from calibrate.serving import rows as R
from calibrate.serving.replay import replay
from sim.bench import corpus as C
from sim.bench import corpus_spec as S
from sim.bench.corpus import engine_overrides, point_from_row, predict_point, predict_row
from sim.errors import ConfigError

#: one curve per static-batch client in the corpus, at a batch of 2 (two requests started together)
STATIC_CURVES = {
    "llama-batched-bench": "dgx_spark_mac-dgxspark-llamacpp-batchedbench-gpt-oss-20b-mxfp4-pp512-tg32",
    "vllm-benchmark-latency": "amd_rocm-rocmblog-llama-3.1-70b-fp8-mi300x-tp8-128-2048",
    "trtllm-static-batch": "trtllm-rocmblog-llama-3.1-70b-fp8-h100-sxm-tp8-128-2048",
}
DO_CURVE = "vllm_independent-do-gtc2026-phase3-eagle3-llama-3.3-70b-fp8-h200-tp1"
QUANTITIES = ("ttft_ms|mean", "ttft_ms|median", "tpot_ms|mean", "e2el_ms|mean", "e2el_ms|p99", "output_tps|value",
              "total_tps|value", "request_tps|value")


@pytest.fixture(scope="module")
def corpus_curves():
    return R.curves(R.load_corpus())


def test_the_static_and_speculative_rules_live_in_sim_and_the_fit_reads_them(corpus_curves):
    assert R.STATIC_BATCH is C.STATIC_BATCH
    assert R.iid_acceptance is S.iid_acceptance and R.spec_override is S.spec_override
    assert R._SPEC_METHODS is S.SPEC_METHODS and not hasattr(R, "SPEC_TABLE")  # one table, sim's
    clients = {rs[0].get("client") or "" for rs in corpus_curves.values()}
    for c in clients:  # the fit's client kind and predict_row's agree on which clients are static batches
        assert (R._client_kind(c) == "static") == C.is_static_batch(c), c
    assert {c for c in clients if C.is_static_batch(c)} == set(STATIC_CURVES)
    assert not C.is_static_batch("llama-bench") and not C.is_static_batch("")


@pytest.mark.parametrize("client", sorted(STATIC_CURVES))
def test_a_static_batch_row_is_priced_as_the_serving_fit_replays_it(corpus_curves, client):
    curve = corpus_curves[STATIC_CURVES[client]]
    row = next(r for r in curve if r["max_concurrency"] == "2")
    assert row["client"] == client
    tool, cl, dep = point_from_row(row)
    assert tool == "vllm" and cl.num_prompts == 2 and cl.max_concurrency == 2 and cl.request_rate == math.inf
    point = next(p for p in R.load_points(curve) if p.load == 2)
    assert (dep.model, dep.engine, dep.quant, dict(dep.overrides)) == (point.model, point.engine, point.quant,
                                                                       point.overrides)
    assert point.prompt_lens == [int(row["input_tokens"])] * 2 and point.output_lens == [int(row["output_tokens"])] * 2
    got = predict_row(row)
    want = replay(point)
    assert "error" not in want
    for q in QUANTITIES:
        qty, stat = q.split("|")
        assert got[(qty, stat)] == pytest.approx(want[q], rel=1e-9), q
    # both requests start and end together: every request's E2E is the batch's, and the batch of 2 is dearer
    assert got[("e2el_ms", "p99")] == pytest.approx(got[("e2el_ms", "mean")], rel=1e-9)
    one = predict_row(next(r for r in curve if r["max_concurrency"] == "1"))
    assert got[("e2el_ms", "mean")] > one[("e2el_ms", "mean")]
    assert got[("output_tps", "value")] > one[("output_tps", "value")]


def test_a_row_predict_row_cannot_price_still_says_why(corpus_curves):
    static = next(r for r in corpus_curves[STATIC_CURVES["llama-batched-bench"]] if r["max_concurrency"] == "1")
    with pytest.raises(ConfigError) as e:
        predict_row({**static, "row_id": "r9", "model": "acme/NoSuchModel-7B"})
    msg = str(e.value)
    assert msg.startswith("r9: model: ") and "acme/NoSuchModel-7B" in msg and "\n" not in msg
    with pytest.raises(ConfigError, match="unknown client 'llama-bench'"):  # a tool no rule replays
        predict_row({**static, "client": "llama-bench"})
    # a corpus row whose model the catalog lacks (InferenceX's GLM-5 FP8)
    glm = next(rs[0] for rs in corpus_curves.values() if rs[0]["model"] == "zai-org/GLM-5-FP8")
    with pytest.raises(ConfigError, match="zai-org/GLM-5-FP8"):
        predict_row(glm)


def test_flags_prose_with_an_unbalanced_quote_is_read_word_by_word():
    # vLLM benchmark_latency rows: "... with --kv-cache-dtype fp8 in the blog's serving commands" (one apostrophe)
    assert engine_overrides("FP8 checkpoints with --kv-cache-dtype fp8 in the blog's serving commands") == \
        {"kv_dtype": "fp8"}
    assert engine_overrides("--max-num-seqs 8 --served-model-name 'a b'") == {"max_num_seqs": 8}  # shlex as before


def test_a_speculative_row_with_stated_acceptance_is_priced_as_the_fit_replays_it(corpus_curves):
    curve = corpus_curves[DO_CURVE]
    row = next(r for r in curve if r["load_kind"] == "rate" and r["request_rate"] == "0.5")
    entry = S.stated_entry(row)
    assert entry is not None and entry["load"] == "0.5"
    tool, cl, dep = point_from_row(row)
    assert dep.overrides["speculative"] == S.spec_override(entry)
    assert dep.overrides["speculative"]["method"] == "eagle" and dep.overrides["speculative"]["k"] == 3
    point = next(p for p in R.load_points(curve) if p.load_kind == "rate" and p.load == 0.5)
    assert dict(dep.overrides) == point.overrides
    got, want = predict_row(row), replay(point)
    # the fit keeps send times to the microsecond (LoadPoint.release_s rounded to 6 decimals): equal to 1e-6
    for q in ("ttft_ms|median", "tpot_ms|median", "itl_ms|mean", "output_tps|value"):
        qty, stat = q.split("|")
        assert got[(qty, stat)] == pytest.approx(want[q], rel=1e-6), q
    # the block is priced: the same requests without it (what predict_row gave before it read the table)
    from dataclasses import replace

    ins, outs = C.row_lengths(row, cl.num_prompts, cl.seed)
    plain = predict_point(tool, cl, replace(dep, overrides={k: v for k, v in dep.overrides.items()
                                                            if k != "speculative"}),
                          load_kind="rate", lengths=(ins, outs))
    # acceptance ~0.0002 at k = 3: every verify step yields ~1 token and pays for 3 drafts, so decoding is slower
    assert got[("tpot_ms", "median")] > plain[("tpot_ms", "median")]


def test_no_stated_acceptance_no_speculative_block(tmp_path):
    row = {"curve_id": "c", "load_kind": "concurrency", "max_concurrency": "4", "request_rate": ""}
    path = tmp_path / "t.csv"
    path.write_text("curve_id,load_kind,load,stated,method,num_speculative_tokens,mean_acceptance_length\n"
                    "c,concurrency,1,yes,eagle3,2,2.0\n"
                    "c,,,no,eagle3,,\n")
    table = S.load_spec_acceptance(path)
    assert S.row_speculative(row, table) == {}  # stated at C=1 only
    assert S.row_speculative({**row, "max_concurrency": "1"}, table)["speculative"]["k"] == 2
    path.write_text("curve_id,load_kind,load,stated,method,num_speculative_tokens,mean_acceptance_length\n"
                    "c,,,yes,ngram,2,2.0\n")
    with pytest.raises(ConfigError, match="method 'ngram' not modelled"):  # per-run entry, a method not priced
        S.row_speculative(row, S.load_spec_acceptance(path))


def test_a_batched_bench_row_runs_all_its_sequences_at_once(corpus_curves):
    # llama-batched-bench decodes its B sequences together in one N_KV_MAX context (llama.cpp
    # examples/batched-bench/README.md): the preset's 4 server slots become B and the header's sizes apply
    curve = corpus_curves[STATIC_CURVES["llama-batched-bench"]]
    row = next(r for r in curve if r["max_concurrency"] == "8")
    ov = C.batched_bench_overrides(row)
    assert ov["max_num_seqs"] == 8
    for key, field in C._BATCHED_BENCH_HEADER.items():
        assert f"{key} = {ov[field]}" in row["engine_flags"]
    assert point_from_row(row)[2].overrides["max_num_seqs"] == 8
    assert C.batched_bench_overrides({**row, "client": "vllm-bench-serve"}) == {}
    # in 4 slots the 8 requests ran in two waves: the last first token came after a whole wave's decode
    tool, client, dep = point_from_row(row)
    lengths = C.static_batch(row)[1:]
    together = predict_point(tool, client, dep, load_kind="concurrency", lengths=lengths)
    four = dataclasses.replace(dep, overrides={**dep.overrides, "max_num_seqs": 4})
    waves = predict_point(tool, client, four, load_kind="concurrency", lengths=lengths)
    assert together[("ttft_ms", "p99")] < 0.7 * waves[("ttft_ms", "p99")]
    assert together[("e2el_ms", "p99")] < waves[("e2el_ms", "p99")]  # and the batch ends sooner
