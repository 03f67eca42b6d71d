"""`predict_row` prices a static-batch tool's row (llama-batched-bench, vLLM's benchmark_latency, TensorRT-LLM's
emulated static batching) and a speculative row with stated acceptance by the serving fit's own rules, now in sim
(sim.bench.corpus STATIC_BATCH / static_batch, sim.bench.corpus_spec): each prediction is the serving fit's replay
of the same load point (calibrate/serving/rows.load_points + replay), a static batch's timed as the tool times it
(sim.bench.corpus_static), and a row it cannot price still says why in one line."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
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


#: the quantities each static-batch tool prints, as the corpus derived them (sim.bench.corpus_static)
TOOL_KEYS = {
    "llama-batched-bench": {("ttft_ms", "mean"), ("tpot_ms", "mean"), ("e2el_ms", "mean"), ("output_tps", "value"),
                            ("total_tps", "value")},
    "vllm-benchmark-latency": {("e2el_ms", "mean"), ("output_tps", "value")},
    "trtllm-static-batch": {("e2el_ms", "mean"), ("output_tps", "value")},
}


@pytest.mark.parametrize("client", sorted(STATIC_CURVES))
def test_a_static_batch_row_is_the_serving_fits_replay_timed_as_the_tool_times_it(corpus_curves, client):
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
    assert set(got) == TOOL_KEYS[client]  # what the tool prints, nothing vLLM bench serve would add
    want = replay(point)  # the same simulated batch, in vLLM's per-request statistics
    assert "error" not in want
    # both prompts fit one step (2 x 512 <= n_batch 2048; 2 x 128 for the others): both requests run in lock-step
    assert want["ttft_ms|p99"] == pytest.approx(want["ttft_ms|mean"], rel=1e-12)
    assert want["e2el_ms|p99"] == pytest.approx(want["e2el_ms|mean"], rel=1e-12)
    b, pp, tg = 2, int(row["input_tokens"]), int(row["output_tokens"])
    if client == "llama-batched-bench":
        # T_PP: the prompt pass, here every request's TTFT; the batch step: every request's TPOT; T has TG steps where
        # the simulated requests (TG tokens, the first from the prompt pass) have TG - 1
        assert got[("ttft_ms", "mean")] == pytest.approx(want["ttft_ms|mean"], rel=1e-9)
        assert got[("tpot_ms", "mean")] == pytest.approx(want["tpot_ms|mean"], rel=1e-9)
        t_ms = want["e2el_ms|mean"] + want["tpot_ms|mean"]
        assert got[("e2el_ms", "mean")] == pytest.approx(t_ms, rel=1e-9)
        assert got[("output_tps", "value")] == pytest.approx(b * tg / (t_ms / 1000), rel=1e-9)
        assert got[("total_tps", "value")] == pytest.approx(b * (pp + tg) / (t_ms / 1000), rel=1e-9)
    else:
        # the batch's latency: the last request's end; B x output over it is vLLM's output throughput of the batch
        assert got[("e2el_ms", "mean")] == pytest.approx(want["e2el_ms|mean"], rel=1e-9)
        assert got[("output_tps", "value")] == pytest.approx(want["output_tps|value"], rel=1e-9)
        assert got[("output_tps", "value")] == pytest.approx(b * tg / (got[("e2el_ms", "mean")] / 1000), rel=1e-12)
    one = predict_row(next(r for r in curve if r["max_concurrency"] == "1"))
    assert got[("e2el_ms", "mean")] > one[("e2el_ms", "mean")]
    assert got[("output_tps", "value")] > one[("output_tps", "value")]


def _timings(prompt, output, first, finish, success=None):
    """A client record of one batch sent at 0 (sim.bench.serve.Timings), with the given first-token and finish times."""
    from sim.bench.serve import Timings

    n = len(first)
    ok = np.ones(n, dtype=bool) if success is None else np.asarray(success)
    return Timings(np.full(n, prompt), np.full(n, output), np.zeros(n), np.zeros(n), np.asarray(first, dtype=float),
                   np.asarray(finish, dtype=float), ok, [""] * n, [np.zeros(0)] * n)


def test_the_tools_figures_of_a_batch_with_known_phases():
    from sim.bench.corpus_static import tool_figures

    # B = 4 prompts of 100 tokens read by 0.4 s (the last first token), then TG - 1 = 4 decode steps of 50 ms together
    t = _timings(100, 5, [0.1, 0.2, 0.3, 0.4], [0.6] * 4)
    got = tool_figures("llama-batched-bench", t)
    total = 0.4 + 5 * 0.05  # T = T_PP + TG steps
    assert got == pytest.approx({("ttft_ms", "mean"): 400.0, ("tpot_ms", "mean"): 50.0, ("e2el_ms", "mean"): 650.0,
                                 ("output_tps", "value"): 4 * 5 / total, ("total_tps", "value"): 4 * 105 / total})
    # a batch latency tool: the last finish, and B x output over it
    for client in ("vllm-benchmark-latency", "trtllm-static-batch"):
        assert tool_figures(client, t) == pytest.approx({("e2el_ms", "mean"): 600.0,
                                                         ("output_tps", "value"): 4 * 5 / 0.6})
    # early prompts decoding while later ones are read: not the tool's schedule, so batched-bench gets no figure;
    # the batch latency is still the last finish
    mixed = _timings(100, 5, [0.1, 0.2, 0.3, 0.4], [0.3, 0.4, 0.5, 0.6])
    assert tool_figures("llama-batched-bench", mixed) == {}
    assert tool_figures("vllm-benchmark-latency", mixed)[("e2el_ms", "mean")] == pytest.approx(600.0)
    # one token each (TG 1): no decode step simulated, the prompt pass alone
    assert tool_figures("llama-batched-bench", _timings(100, 1, [0.4] * 4, [0.4] * 4)) == \
        pytest.approx({("ttft_ms", "mean"): 400.0})
    # a request the server did not complete: the tool prints nothing
    failed = _timings(100, 5, [0.1, 0.2, 0.3, 0.4], [0.6] * 4, success=[True, True, True, False])
    assert tool_figures("llama-batched-bench", failed) == {} and tool_figures("trtllm-static-batch", failed) == {}
    assert tool_figures("vllm-bench-serve", t) == {}


def test_a_static_rows_lengths_are_computed_once_and_handed_on(corpus_curves, monkeypatch):
    row = next(r for r in corpus_curves[STATIC_CURVES["trtllm-static-batch"]] if r["max_concurrency"] == "4")
    calls = []
    real = C.static_batch
    monkeypatch.setattr(C, "static_batch", lambda r: calls.append(1) or real(r))
    got = predict_row(row)
    assert len(calls) == 1 and set(got) == TOOL_KEYS["trtllm-static-batch"]
    tool, client, dep, lengths = C._row_point(row)
    assert (tool, client, dep) == point_from_row(row)
    assert [x.tolist() for x in lengths] == [[128] * 4, [2048] * 4]
    other = next(rs[0] for rs in corpus_curves.values() if rs[0].get("client") == "vllm-bench-serve")
    assert C._row_point(other)[3] is None  # a drawn dataset: predict_row draws it (row_lengths)


#: non-static rows of several clients: predict_row is the composition it was before static rows changed
OTHER_ROWS = ("vllm-bench-serve", "sglang-bench-serving", "custom", "guidellm")


@pytest.mark.parametrize("client", OTHER_ROWS)
def test_a_non_static_rows_prediction_is_unchanged(corpus_curves, client):
    """predict_row of any other client is predict_point of the row's point at `row_lengths`, as before static rows
    got their tools' figures (also checked byte for byte over 71 priced rows of all CSVs when this changed)."""
    rows = [rs[0] for rs in corpus_curves.values() if rs[0].get("client") == client]
    if not rows:
        pytest.skip(f"no {client} row in the corpus")
    for row in rows:
        try:
            tool, cl, dep = point_from_row(row)
        except ConfigError:
            continue
        if cl.num_prompts > 1000:
            continue
        ins, outs = C.row_lengths(row, cl.num_prompts, cl.seed)
        want = predict_point(tool, cl, dep, load_kind=str(row.get("load_kind") or "concurrency"), lengths=(ins, outs),
                             prefix_tokens=C.shared_prefix(row, ins))
        assert predict_row(row) == want
        assert ("ttft_ms", "p99") in want  # vLLM-style per-request statistics, not a tool's batch figures
        return
    pytest.skip(f"no small priceable {client} row")


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


def test_a_batched_bench_batch_reads_every_prompt_before_it_decodes_and_is_timed_from_its_steps(corpus_curves):
    """The tool's schedule (llama.cpp examples/batched-bench/batched-bench.cpp): all B prompts read in n_batch slices,
    then TG decode calls of all B sequences. Its figures, computed here from the engine's own step record (not from
    the requests' times `tool_figures` reads), equal predict_row's."""
    from sim.bench.serve import Workload, serve_replica

    row = next(r for r in corpus_curves[STATIC_CURVES["llama-batched-bench"]] if r["max_concurrency"] == "8")
    tool, client, dep = point_from_row(row)
    assert dep.overrides["scheduler"] == "prefill_first"
    b, ins, outs = C.static_batch(row)
    pp, tg = int(ins[0]), int(outs[0])
    f = serve_replica(Workload(ins, outs, np.zeros(b)), dep, max_concurrency=b).replica.iterations.frame()
    prompt, decode = f[f.prefill_tokens > 0], f[f.prefill_tokens == 0]
    # 8 x 512 prompt tokens in slices of n_batch = 2048: two prompt steps, before any decode step
    assert list(prompt.prefill_tokens) == [2048, 2048] and (prompt.decode_seqs == 0).all()
    assert decode.start_s.min() >= (prompt.start_s + prompt.duration_s).max()
    # then TG - 1 decode steps (the first token came from the prompt pass), every one of all B sequences
    assert int(decode.steps.sum()) == tg - 1 and (decode.decode_seqs == b).all()
    t_pp = float((prompt.start_s + prompt.duration_s).max())  # the batch started at 0
    step = float(decode.duration_s.sum()) / (tg - 1)
    total = t_pp + tg * step
    got = predict_row(row)
    assert got == pytest.approx({("ttft_ms", "mean"): 1000 * t_pp, ("tpot_ms", "mean"): 1000 * step,
                                 ("e2el_ms", "mean"): 1000 * total, ("output_tps", "value"): b * tg / total,
                                 ("total_tps", "value"): b * (pp + tg) / total}, rel=1e-9)
    # llama-server's slots (the preset's scheduler) decode the first prompts while the last are read: the batch is not
    # the tool's, and tool_figures gives no figure rather than a wrong one
    from sim.bench.corpus_static import tool_figures
    from sim.bench.serve import simulate_workload

    slots = dataclasses.replace(dep, overrides={**dep.overrides, "scheduler": "slots"})
    assert tool_figures(row["client"], simulate_workload(Workload(ins, outs, np.zeros(b)), slots,
                                                         max_concurrency=b)) == {}
