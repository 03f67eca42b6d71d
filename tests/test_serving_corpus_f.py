"""Serving collection f (benchmarks/serving/corpus_f.csv, build_corpus_f.py; COLLECTIONS-f.md): the CSV is what the
build script makes from its vendored sources, every figure is the source's JSON text, a curve varies only in load,
the vendored files say what the rows claim (10 x C requests, one text chunk per token except at the points marked
outlier), the stated input length is the collector's token count, and the serving fit replays the five curves."""
from __future__ import annotations

import json
import math
import re
import runpy
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from serving_csv import by_curve, schema_rows

ROOT = Path(__file__).resolve().parent.parent
SERVING = ROOT / "benchmarks" / "serving"
CSV = SERVING / "corpus_f.csv"
BUILD = SERVING / "build_corpus_f.py"
COLUMNS = runpy.run_path(str(SERVING / "schema.py"))["COLUMNS"]
FIXED = ["engine", "engine_version", "engine_flags", "device", "n_devices", "tp", "model", "quant", "client",
         "dataset", "input_tokens", "output_tokens", "load_kind", "publisher", "kv_cache_dtype", "range_ratio"]
FOLDER = "Azir111__trtllm-vs-vllm"


def _rows() -> list[dict]:
    return schema_rows(CSV, COLUMNS)


def _curves() -> dict[str, list[dict]]:
    return by_curve(_rows())


def test_build_script_reproduces_the_csv():
    proc = subprocess.run([sys.executable, str(BUILD), "--check"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_check_fails_on_a_drifted_csv(tmp_path):
    bad = tmp_path / "corpus_f.csv"
    text = CSV.read_text(encoding="utf-8")
    assert ",43.5," in text
    bad.write_text(text.replace(",43.5,", ",43.6,", 1), encoding="utf-8")
    proc = subprocess.run([sys.executable, str(BUILD), "--check", "--out", str(bad)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "differs" in proc.stderr


def test_ids_sources_and_load_fields():
    seen = set()
    for r in _rows():
        assert r["row_id"].startswith(r["curve_id"]) and r["curve_id"].startswith("corpus_f-"), r["row_id"]
        assert r["row_id"] not in seen, r["row_id"]
        seen.add(r["row_id"])
        assert re.match(r"https://github\.com/Azir111/trtllm-vs-vllm/blob/[0-9a-f]{40}/results/", r["source"])
        assert r["load_kind"] == "concurrency" and r["max_concurrency"].isdigit(), r["row_id"]
        assert r["num_prompts"] == str(10 * int(r["max_concurrency"])), r["row_id"]
        assert r["warmup"] == r["max_concurrency"] and r["ignore_eos"] == "true", r["row_id"]
        assert float(r["value"]) > 0 and not r["derivation"], r["row_id"]


def test_a_curve_varies_only_in_load_and_has_three_points():
    curves = _curves()
    assert len(curves) == 5
    for cid, rows in curves.items():
        for field in FIXED:
            assert len({r[field] for r in rows}) == 1, (cid, field)
        keys = [(r["max_concurrency"], r["quantity"], r["statistic"]) for r in rows]
        assert len(keys) == len(set(keys)), cid
        kept = {r["max_concurrency"] for r in rows if "outlier" not in r["notes"].lower()}
        assert len(kept) >= 3, cid


def test_vendored_json_agrees_with_its_rows():
    """Each row's figure is its file's number at its concurrency (as_printed quotes the JSON text); a point is
    marked outlier exactly when its chunk count per request (out_tok_s / qps) falls below the 256 forced tokens
    beyond the rounding of qps, or it is the NVFP4 run's C = 48 in the CUDA-graph capture hole."""
    by_file: dict[str, list[dict]] = defaultdict(list)
    for r in _rows():
        m = re.match(r"https://github.com/[^/]+/[^/]+/blob/([0-9a-f]{40})/(.+)$", r["source"])
        by_file[f"{m.group(1)}/{m.group(2)}"].append(r)
    assert len(by_file) == 5
    for rel, rows in by_file.items():
        d = json.loads((SERVING / "sources" / FOLDER / rel).read_text(encoding="utf-8"))
        assert d["osl"] == 256 and d["rounds"] == 10, rel
        by_c = {x["concurrency"]: x for x in d["rows"]}
        assert {int(r["max_concurrency"]) for r in rows} == set(by_c), rel
        for r in rows:
            x = by_c[int(r["max_concurrency"])]
            key = r["as_printed"].split('"')[3]
            assert math.isclose(float(x[key]), float(r["value"]), rel_tol=1e-12), (rel, r["row_id"])
            assert x["n_req"] == int(r["num_prompts"]), rel
            per_req = x["out_tok_s"] / x["qps"]
            merged = per_req < 256 - (256 * 0.0005 / x["qps"] + 0.1)
            hole = d["tag"] == "trtllm_nvfp4_v2" and x["concurrency"] == 48
            assert ("outlier" in r["notes"]) == (merged or hole), (rel, r["row_id"], per_req)
    marked = {(r["curve_id"].split("-rtx5070ti-")[1], int(r["max_concurrency"]))
              for r in _rows() if "outlier" in r["notes"]}
    assert marked == {("trtllm1.3.0rc15-pytorch-llama-3.1-8b-nvfp4-60-256", 48)} | {
        ("vllm0.13.0-llama-3.1-8b-fp8-60-256", c) for c in (2, 4, 8, 16, 32)}


def test_input_length_is_the_counted_prompt_plus_bos():
    """The source prints no token count: the rows carry the collector's count (59 Llama 3 tokens, listed in the
    build script) plus BOS, and the prompt the script names is the client's (the vendored JSON has no prompt, so
    the check is that the count, the ids and the rows agree)."""
    mod = runpy.run_path(str(BUILD))
    assert len(mod["PROMPT_IDS"]) == 59 and mod["INPUT_TOKENS"] == 60
    assert all(0 <= i < 128000 for i in mod["PROMPT_IDS"])
    assert mod["PROMPT"].startswith("You are a helpful assistant.") and mod["PROMPT"].endswith("now: ")
    assert {r["input_tokens"] for r in _rows()} == {"60"} and {r["output_tokens"] for r in _rows()} == {"256"}


def test_the_fit_replays_every_curve_without_its_outlier_points():
    sys.path.insert(0, str(ROOT))
    from calibrate.serving.rows import exclusion, load_points, release_of

    curves = _curves()
    assert all(exclusion(rows) is None for rows in curves.values())
    releases = {release_of(rows[0]["engine"], rows[0]["engine_version"]) for rows in curves.values()}
    assert releases == {"trtllm@1.0", "vllm@0.11"}
    loads = {cid.split("-rtx5070ti-")[1]: [p.max_concurrency for p in load_points(rows)]
             for cid, rows in curves.items()}
    assert loads["trtllm1.3.0rc15-pytorch-llama-3.1-8b-nvfp4-60-256"] == [1, 2, 4, 8, 16, 32, 64]
    assert loads["trtllm1.3.0rc15-pytorch-pad-llama-3.1-8b-nvfp4-60-256"] == [40, 48, 56]
    assert loads["vllm0.13.0-llama-3.1-8b-fp8-60-256"] == [1, 48, 64]
    pts = load_points(curves["corpus_f-azir-rtx5070ti-trtllm1.3.0rc15-pytorch-llama-3.1-8b-fp8-60-256"])
    assert all(set(p.prompt_lens) == {60} and set(p.output_lens) == {256} for p in pts)
    assert [p.replayed_prompts for p in pts] == [10 * c for c in (1, 2, 4, 8, 16, 32, 48, 64)]
