"""Serving collection e (benchmarks/serving/corpus_e.csv, build_corpus_e.py; COLLECTIONS-e.md): the CSV is what the
build script makes from its vendored sources, every figure is the source's text (or a written-out s -> ms
conversion of it), a curve varies only in load, the vendored JSON files say what the rows claim (full-length
outputs, the concurrency of the file name), and the serving fit replays exactly the curves the collection says it
replays."""
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

import pytest

ROOT = Path(__file__).resolve().parent.parent
SERVING = ROOT / "benchmarks" / "serving"
CSV = SERVING / "corpus_e.csv"
COLUMNS = runpy.run_path(str(SERVING / "schema.py"))["COLUMNS"]
FIXED = ["engine", "engine_version", "engine_flags", "device", "n_devices", "tp", "model", "quant", "client",
         "dataset", "input_tokens", "output_tokens", "load_kind", "publisher", "kv_cache_dtype", "range_ratio"]


def _rows() -> list[dict]:
    return schema_rows(CSV, COLUMNS)


def _curves() -> dict[str, list[dict]]:
    return by_curve(_rows())


def test_build_script_reproduces_the_csv():
    proc = subprocess.run([sys.executable, str(SERVING / "build_corpus_e.py"), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_check_fails_on_a_drifted_csv(tmp_path):
    bad = tmp_path / "corpus_e.csv"
    bad.write_text(CSV.read_text(encoding="utf-8").replace(",0.0151,", ",0.0152,", 1) + "x\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, str(SERVING / "build_corpus_e.py"), "--check", "--out", str(bad)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "differs" in proc.stderr


def test_ids_sources_and_load_fields():
    seen = set()
    for r in _rows():
        assert r["row_id"].startswith(r["curve_id"]) and r["curve_id"].startswith("corpus_e-"), r["row_id"]
        assert r["row_id"] not in seen, r["row_id"]
        seen.add(r["row_id"])
        assert r["source"].startswith("https://"), r["row_id"]
        if "github.com" in r["source"]:
            assert re.search(r"/blob/[0-9a-f]{40}/", r["source"]), f"{r['row_id']}: GitHub source not at a commit"
        assert r["load_kind"] == "concurrency" and r["max_concurrency"].isdigit(), r["row_id"]
        assert float(r["value"]) > 0, r["row_id"]


def test_figure_is_printed_or_derived():
    """A row's value is a number in its as_printed text; a converted one writes `printed s x 1000 = value ms`."""
    for r in _rows():
        v = float(r["value"])
        printed = [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", r["as_printed"])]
        if not r["derivation"]:
            assert any(math.isclose(v, p, rel_tol=1e-12) for p in printed), r["row_id"]
            continue
        m = re.fullmatch(r"([\d.]+) s x 1000 = ([\d.]+) ms", r["derivation"])
        assert m, r["derivation"]
        assert float(m.group(1)) in printed and math.isclose(float(m.group(1)) * 1000, v, rel_tol=1e-9), r["row_id"]


def test_a_curve_varies_only_in_load_and_has_three_points():
    for cid, rows in _curves().items():
        for field in FIXED:
            assert len({r[field] for r in rows}) == 1, (cid, field)
        keys = [(r["max_concurrency"], r["quantity"], r["statistic"]) for r in rows]
        assert len(keys) == len(set(keys)), cid
        assert len({r["max_concurrency"] for r in rows}) >= 3, cid


@pytest.mark.parametrize("folder", ["pallavim1__ai-infra-projects", "waynehacking8__trtllm-triton-serving"])
def test_vendored_json_agrees_with_its_rows(folder):
    """Each row that cites a vendored JSON file: the file parses, its concurrency is the row's, and its outputs ran
    to the stated length (so ignore_eos=true is what the file shows, not only what the notes say)."""
    by_file: dict[str, list[dict]] = defaultdict(list)
    for r in _rows():
        m = re.match(r"https://github.com/([^/]+)/([^/]+)/blob/([0-9a-f]{40})/(.+)$", r["source"])
        if m and f"{m.group(1)}__{m.group(2)}" == folder:
            by_file[f"{m.group(3)}/{m.group(4)}"].append(r)
    assert by_file, folder
    for rel, rows in by_file.items():
        d = json.loads((SERVING / "sources" / folder / rel).read_text(encoding="utf-8"))
        c = int(d.get("max_concurrency") or d.get("concurrency"))
        assert {r["max_concurrency"] for r in rows} == {str(c)}, rel
        out = int(rows[0]["output_tokens"])
        if "total_output_tokens" in d:
            assert d["total_output_tokens"] == out * d["completed"], rel
        else:
            assert abs(d["out_tokens_mean"] - out) <= 0.5, rel
        for r in rows:
            key = r["as_printed"].split('"')[1]
            factor = 1000 if r["derivation"] else 1
            assert math.isclose(float(d[key]) * factor, float(r["value"]), rel_tol=1e-9), (rel, key)


def test_wmx_rows_agree_with_the_stated_output_length():
    """ai.wmx.dev prints 128 output tokens per request: output tok/s / req/s is 128 within the rounding of req/s."""
    pts: dict[str, dict] = defaultdict(dict)
    for r in _rows():
        if r["curve_id"].startswith("corpus_e-wmx-"):
            pts[r["max_concurrency"]][r["quantity"]] = float(r["value"])
    assert len(pts) == 6
    for c, q in pts.items():
        assert abs(q["output_tps"] / q["request_tps"] - 128) / 128 < 0.05, c


def test_the_fit_replays_the_curves_the_collection_says_it_replays():
    sys.path.insert(0, str(ROOT))
    from calibrate.serving.rows import exclusion

    why = {cid: exclusion(rows) for cid, rows in _curves().items()}
    replayed = {cid for cid, w in why.items() if w is None}
    llama = {cid for cid in why if "-wayne-" in cid and "llama-3.1-8b" in cid}
    assert len(llama) == 11
    assert replayed == llama | {
        "corpus_e-pallavim1-h100x2-vllm0.29.0-gemma-4-26b-a4b-fp8-tp2ep-10000-500",
        "corpus_e-pallavim1-rtxpro6000x2-vllm0.29.0-gemma-4-26b-a4b-fp8-tp2ep-10000-500",
        "corpus_e-pallavim1-rtxpro6000-vllm-gemma-4-26b-a4b-fp8-tp1-10000-500",
    }
    assert why["corpus_e-pallavim1-h100x2-vllm-gemma-4-26b-a4b-fp8-tp2-eager-10240-500"].startswith("outlier")
    others = [w for cid, w in why.items() if "-wayne-" in cid and cid not in llama]
    assert others and all("fixed-prompt" in w or "not in the catalog" in w for w in others)


def test_a_fixed_prompt_closed_loop_replays_only_with_its_lengths_stated():
    """rows.FIXED_LENGTH_DATASETS: one fixed prompt with stated input and output lengths replays as fixed lengths
    (sim.bench.corpus.row_lengths); the same curve without the input length stays excluded."""
    sys.path.insert(0, str(ROOT))
    from calibrate.serving.rows import exclusion, load_points

    curve = _curves()["corpus_e-wayne-h100x2-trtllm0.20-pytorch-cg-llama-3.1-8b-fp8-tp2"]
    assert exclusion(curve) is None
    pts = load_points(curve)
    assert [p.max_concurrency for p in pts] == [1, 4, 16, 32, 64, 128]
    assert all(set(p.prompt_lens) == {12} and set(p.output_lens) == {256} for p in pts)
    assert [p.replayed_prompts for p in pts] == [8 * c for c in (1, 4, 16, 32, 64, 128)]
    blank = [dict(r, input_tokens="") for r in curve]
    assert "fixed-prompt" in exclusion(blank)
