"""A corpus row's deployment is resolved by one rule (sim.bench.corpus_deployment, sim.bench.corpus `row_overrides`)
for `predict_row` and the serving fit's load points: its model cell's catalog entry (a Hugging Face id through the
catalog's `hf_repos`), its engine version's preset release, and its engine overrides."""
from __future__ import annotations

from dataclasses import replace

import pytest

from calibrate.serving.replay import replay
from calibrate.serving.rows import curves, load_corpus, load_points
from sim.bench.corpus import point_from_row, predict_point, predict_row, row_lengths
from sim.errors import ConfigError

#: faradawn's vLLM 0.11.2 run of Llama 3 8B Instruct on an H200 (benchmarks/serving/corpus_c.csv): the model cell is
#: the Hugging Face id meta-llama/Meta-Llama-3-8B-Instruct; C=1 replays 5 requests
HF_CURVE = "corpus_c-faradawn-bench3-vllm0.11.2-h200-llama-3-8b-tp1-128-512"
#: SGLang's cookbook GLM-4.7-Flash on a B200 (zai-org/GLM-4.7-Flash; C=1: 10 requests)
HF_SGLANG_CURVE = "sglang-cookbook-glm-4.7-flash-b200-tp1-1000-1000"


@pytest.fixture(scope="module")
def corpus_curves():
    return curves(load_corpus())


def _at(rows: list[dict], c: int) -> list[dict]:
    return [r for r in rows if r["max_concurrency"] == str(c)]


def test_the_rule_lives_in_sim_and_the_fit_reads_the_same_one():
    import calibrate.serving.rows as rows
    import sim.bench.corpus as corpus
    import sim.bench.corpus_deployment as dep

    for name in ("model_id", "release_of", "NAMED_MODELS", "VLLM_RELEASE_DATES", "build_date", "dated_release"):
        assert getattr(rows, name) is getattr(dep, name), name
    assert rows._catalog_models is dep.catalog_models and rows._overrides is corpus.row_overrides
    assert rows.MODEL_ALIASES == dep.model_aliases() and rows.MODEL_ALIASES["meta-llama/Meta-Llama-3-8B-Instruct"]


@pytest.mark.parametrize("curve_id", [HF_CURVE, HF_SGLANG_CURVE])
def test_a_row_naming_a_hugging_face_id_predicts_as_the_fit_replays_it(corpus_curves, curve_id):
    rows = _at(corpus_curves[curve_id], 1)
    row = rows[0]
    assert "/" in row["model"]  # an HF id, not a catalog name
    _, client, dep = point_from_row(row)
    point = next(p for p in load_points(corpus_curves[curve_id]) if p.load == 1)
    assert (dep.model, dep.engine, dep.quant) == (point.model, point.engine, point.quant)
    assert dict(dep.overrides) == point.overrides
    v = predict_row(row)
    assert v[("ttft_ms", "median")] > 0
    assert v[("ttft_ms", "median")] == pytest.approx(replay(point)["ttft_ms|median"], rel=1e-9)


def test_a_rows_engine_version_picks_the_release_the_fit_replays(corpus_curves):
    # the same run as if its version were vLLM 0.9.2 (V1 already the default, before 0.11: vllm@0.10)
    rows = [{**r, "engine_version": "0.9.2"} for r in _at(corpus_curves[HF_CURVE], 1)]
    tool, client, dep = point_from_row(rows[0])
    point = load_points(rows)[0]
    assert dep.engine == point.engine == "vllm@0.10"
    v = predict_row(rows[0])
    assert v[("ttft_ms", "median")] == pytest.approx(replay(point)["ttft_ms|median"], rel=1e-9)
    ins, outs = row_lengths(rows[0], client.num_prompts, client.seed)
    newest = predict_point(tool, client, replace(dep, engine="vllm@0.11"), lengths=(ins, outs))
    assert newest[("ttft_ms", "median")] != v[("ttft_ms", "median")]  # the release is priced, not just named
    # no version stated: the newest release, the preset's default (so such rows price as before)
    assert point_from_row({**rows[0], "engine_version": ""})[2].engine == "vllm@0.11"
    assert point_from_row({**rows[0], "engine": "vllm@0.7"})[2].engine == "vllm@0.7"  # a release as written


ROW = dict(row_id="r1", client="vllm-bench-serve", device="h100-sxm", model="llama-3.1-8b", quant="bf16",
           engine="vllm", engine_flags="--max-num-seqs 64", kv_cache_dtype="auto", tp="1", dataset="random",
           input_tokens="512", output_tokens="64", range_ratio="", num_prompts="40", warmup="",
           load_kind="concurrency", max_concurrency="8", request_rate="", burstiness="")


def test_a_row_whose_model_the_catalog_does_not_know_is_a_one_line_error_naming_it():
    with pytest.raises(ConfigError) as e:
        predict_row({**ROW, "model": "acme/NoSuchModel-7B"})
    msg = str(e.value)
    assert "acme/NoSuchModel-7B" in msg and msg.startswith("r1: model: ") and "\n" not in msg
    # an HF id of a catalog entry resolves; the same id with a typo does not
    # (the catalog serves Llama 3 8B Instruct as llama-3.1-8b: its hf_repos lists it, same config.json shapes)
    assert point_from_row({**ROW, "model": "meta-llama/Meta-Llama-3-8B-Instruct"})[2].model == "llama-3.1-8b"
    with pytest.raises(ConfigError, match="meta-llama/Meta-Llama-3-8B-Instrukt"):
        point_from_row({**ROW, "model": "meta-llama/Meta-Llama-3-8B-Instrukt"})


def test_a_rows_engine_overrides_are_the_fits():
    # a collector's prose about the server is not parsed as flags (the fit never read it)
    prose = {**ROW, "engine_flags": "vllm serve with non-default args {'max_num_seqs': 32, 'model': 'x'}"}
    assert dict(point_from_row(prose)[2].overrides) == {"tp": 1}
    # a blank tp is one device; the kv_cache_dtype column's fp8 wins over the flags' auto
    both = {**ROW, "tp": "", "kv_cache_dtype": "fp8_e4m3", "engine_flags": "--kv-cache-dtype auto --max-num-seqs 16"}
    assert dict(point_from_row(both)[2].overrides) == {"tp": 1, "kv_dtype": "fp8", "max_num_seqs": 16}
    assert point_from_row({**ROW, "quant": " fp8 "})[2].quant == "fp8"


def test_a_batched_bench_row_routes_a_moe_model_as_the_kernel_fit_replays_that_benchmark(corpus_curves):
    # llama-batched-bench feeds every sequence the same token: gpt-oss-120b's experts are then priced with the
    # benchmark's fitted routing (ModelSpec.identical_tokens_pool_fraction), as calibrate/public replays the same
    # benchmark's kernel rows; a vLLM row of the same model keeps the model's own
    from sim.catalog.lookup import get_model

    spec = get_model("gpt-oss-120b")
    assert spec.identical_tokens_pool_fraction is not None
    assert spec.identical_tokens_pool_fraction != spec.expert_pool_fraction
    bench = next(r for rows in corpus_curves.values() for r in rows
                 if r["client"] == "llama-batched-bench" and r["model"] == "gpt-oss-120b")
    _, _, dep = point_from_row(bench)
    assert dep.model_overrides == {"expert_pool_fraction": spec.identical_tokens_pool_fraction}
    served = next(r for rows in corpus_curves.values() for r in rows
                  if r["client"] != "llama-batched-bench" and r["model"] == "gpt-oss-120b")
    assert point_from_row(served)[2].model_overrides is None
    # and it moves the batch's prediction: more distinct experts at the model's own routing
    own = predict_point(*point_from_row(bench)[:2], replace(dep, model_overrides=None), lengths=None)
    assert own != predict_point(*point_from_row(bench)[:2], dep, lengths=None)
