"""A corpus row is priced with the prompt prefix its requests share (sim.bench.corpus `shared_prefix`), as the
serving fit's replay prices its load point: a fixed-prompt row's whole prompt goes through the engine's prefix
cache, and every other row's workload is what it was before `predict_row` passed a prefix."""
from __future__ import annotations

import pytest

from calibrate.serving.replay import replay
from calibrate.serving.rows import curves, load_corpus, load_points
from sim.bench.corpus import point_from_row, predict_point, predict_row, row_lengths, shared_prefix
from sim.bench.serve import Workload, run_client
from sim.errors import ConfigError

#: Azir111's TensorRT-LLM FP8 curve on an RTX 5070 Ti (benchmarks/serving/corpus_f.csv): one 60-token prompt sent
#: 10 x C times by C closed-loop clients
FIXED_CURVE = "corpus_f-azir-rtx5070ti-trtllm1.3.0rc15-pytorch-llama-3.1-8b-fp8-60-256"


@pytest.fixture(scope="module")
def corpus_curves():
    return curves(load_corpus())


def _row(rows, c: int) -> dict:
    return next(r for r in rows if r["max_concurrency"] == str(c) and (r["quantity"], r["statistic"]) == ("ttft_ms",
                                                                                                         "median"))


def test_the_rule_lives_in_sim_and_the_fit_reads_the_same_one():
    import calibrate.serving.rows as rows
    import sim.bench.corpus as corpus

    assert rows.shared_prefix is corpus.shared_prefix and rows.FIXED_LENGTH_DATASETS is corpus.FIXED_LENGTH_DATASETS


@pytest.mark.parametrize("c", [16, 64])
def test_a_fixed_prompt_row_is_priced_through_the_prefix_cache_as_the_fit_replays_it(corpus_curves, c):
    rows = corpus_curves[FIXED_CURVE]
    row = _row(rows, c)
    tool, client, dep = point_from_row(row)
    ins, outs = row_lengths(row, client.num_prompts, client.seed)
    assert shared_prefix(row, ins) == int(ins.min()) == 60
    shared = predict_row(row)[("ttft_ms", "median")]
    # the same requests with fresh prompts (what predict_row gave before): every round of C prompts is prefilled
    # in full, where with the prefix cache only the tokens past the last full KV block are
    fresh = predict_point(tool, client, dep, load_kind="concurrency", lengths=(ins, outs))[("ttft_ms", "median")]
    assert shared < 0.5 * fresh
    # a random dataset with fixed lengths (range ratio 1 in the row's client's [I r, I] reading): nothing shared
    rnd = {**row, "dataset": "random", "range_ratio": "1"}
    assert shared_prefix(rnd, ins) == 0
    assert shared < 0.5 * predict_row(rnd)[("ttft_ms", "median")]
    # the serving fit's replay of the same point (no fitted parameters): the same requests, the same prefix
    point = next(p for p in load_points(rows) if p.load == c)
    assert point.shared_prefix_tokens == 60 and point.prompt_lens == ins.tolist()
    assert shared == pytest.approx(replay(point)["ttft_ms|median"], rel=1e-9)


ROW = dict(row_id="r1", client="vllm-bench-serve", device="h100-sxm", model="llama-3.1-8b", quant="bf16",
           engine="vllm", engine_flags="--max-num-seqs 64", kv_cache_dtype="auto", tp="1", dataset="random",
           input_tokens="512", output_tokens="64", range_ratio="", num_prompts="40", warmup="",
           load_kind="concurrency", max_concurrency="8", request_rate="", burstiness="")


@pytest.mark.parametrize("row", [ROW, {**ROW, "dataset": "sharegpt"}, {**ROW, "client": "aiperf"},
                                 {**ROW, "client": "guidellm"}, {**ROW, "request_rate": "4", "load_kind": "rate"}])
def test_a_row_without_a_fixed_prompt_is_priced_as_before(row):
    tool, client, dep = point_from_row(row)
    ins, outs = row_lengths(row, client.num_prompts, client.seed)
    assert shared_prefix(row, ins) == 0
    v = predict_row(row)
    # predict_point as predict_row called it before it passed a prefix
    assert v == predict_point(tool, client, dep, load_kind=row["load_kind"], lengths=(ins, outs))
    if tool == "vllm":  # and the client run it comes from, with a workload that has no prefix field set
        from sim.bench.datasets import release_times

        r = run_client(client, dep, workload=Workload(ins, outs, release_times(client, len(ins))), date="t")
        assert v[("ttft_ms", "median")] == r["median_ttft_ms"] and v[("output_tps", "value")] == r["output_throughput"]


def test_a_shared_prefix_needs_prompts_at_least_as_long():
    tool, client, dep = point_from_row(ROW)
    ins, outs = row_lengths(ROW, client.num_prompts, client.seed)
    with pytest.raises(ConfigError, match="prefix_tokens"):
        predict_point(tool, client, dep, prefix_tokens=16)
    with pytest.raises(ConfigError, match="prefix_tokens"):
        predict_point(tool, client, dep, lengths=(ins, outs), prefix_tokens=int(ins.min()) + 1)
