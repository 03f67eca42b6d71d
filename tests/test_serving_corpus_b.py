"""The corpus-b serving collections (benchmarks/serving/{sglang,dgx_spark_mac,trtllm,amd_rocm,vllm_independent}.csv)
keep the serving-corpus schema and their own promises: every row's figure is either found in its
`as_printed` text or carries a derivation, row ids are unique, a curve varies only in load, and
the transcribed llama-batched-bench tables are arithmetically consistent."""
from __future__ import annotations

import csv
import runpy
import math
import re
from pathlib import Path

import pytest

SERVING = Path(__file__).resolve().parent.parent / "benchmarks" / "serving"
FILES = ["sglang.csv", "dgx_spark_mac.csv", "trtllm.csv", "amd_rocm.csv", "vllm_independent.csv"]

# the schema the import and build scripts write (benchmarks/serving/schema.py)
COLUMNS = runpy.run_path(str(SERVING / "schema.py"))["COLUMNS"]
QUANTITIES = {"ttft_ms", "tpot_ms", "itl_ms", "e2el_ms", "output_tps", "total_tps", "request_tps", "tps_per_user"}
# Fields a sweep holds fixed: rows of one curve_id must agree on all of them.
FIXED = ["engine", "engine_version", "engine_flags", "device", "n_devices", "tp", "model",
         "quant", "client", "dataset", "input_tokens", "output_tokens", "load_kind"]


def _rows(name: str) -> list[dict]:
    with (SERVING / name).open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == COLUMNS, f"{name}: columns differ from the schema"
        return list(reader)


@pytest.mark.parametrize("name", FILES)
def test_rows_follow_the_schema(name):
    rows = _rows(name)
    assert rows, name
    for r in rows:
        assert r["row_id"].strip() and r["curve_id"].strip(), r
        assert r["source"].startswith("https://github.com/"), r["row_id"]
        assert r["quantity"] in QUANTITIES, (r["row_id"], r["quantity"])
        assert r["load_kind"] in {"concurrency", "rate"}, r["row_id"]
        if r["load_kind"] == "concurrency":
            assert r["max_concurrency"].isdigit(), r["row_id"]
        else:
            assert r["request_rate"] == "inf" or float(r["request_rate"]) > 0, r["row_id"]
        v = float(r["value"])
        assert math.isfinite(v) and v > 0, r["row_id"]


def test_row_ids_are_unique_across_the_collections():
    seen: set[str] = set()
    for name in FILES:
        for r in _rows(name):
            assert r["row_id"] not in seen, r["row_id"]
            seen.add(r["row_id"])


@pytest.mark.parametrize("name", FILES)
def test_figure_is_printed_or_derived(name):
    """A row without a derivation must carry its value verbatim (thousands separators aside)."""
    for r in _rows(name):
        if r["derivation"]:
            continue
        printed = [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", r["as_printed"].replace(",", ""))]
        v = float(r["value"])
        assert any(math.isclose(v, p, rel_tol=1e-12, abs_tol=0) for p in printed), (r["row_id"], r["value"], r["as_printed"])


@pytest.mark.parametrize("name", FILES)
def test_a_curve_varies_only_in_load(name):
    curves: dict[str, list[dict]] = {}
    for r in _rows(name):
        curves.setdefault(r["curve_id"], []).append(r)
    for cid, rows in curves.items():
        for field in FIXED:
            assert len({r[field] for r in rows}) == 1, (cid, field)
        keys = [(r["max_concurrency"], r["request_rate"], r["quantity"], r["statistic"]) for r in rows]
        assert len(keys) == len(set(keys)), f"{cid}: two rows for one load point and metric"


def test_batched_bench_rows_are_consistent():
    """DGX Spark llama-batched-bench: the derived TPOT and output rate agree with the printed S_TG and S."""
    for r in _rows("dgx_spark_mac.csv"):
        if r["client"] != "llama-batched-bench":
            continue
        cells = [float(c) for c in r["as_printed"].split("row:")[1].strip().strip("|").split("|")]
        pp, tg, b, nkv, t_pp, s_pp, t_tg, s_tg, t, s = cells
        assert nkv == b * (pp + tg)
        assert math.isclose(b * tg / t_tg, s_tg, rel_tol=0.01)
        v = float(r["value"])
        if r["quantity"] == "tpot_ms":
            assert math.isclose(v, t_tg * 1000 / tg, rel_tol=1e-3)
        if r["quantity"] == "output_tps":
            assert math.isclose(v, b * tg / t, rel_tol=1e-3)


@pytest.mark.parametrize("name", FILES)
def test_ids_carry_the_collection_name(name):
    """Row and curve ids start with the file's stem, so no other collection can reuse them."""
    stem = name[:-4] + "-"
    for r in _rows(name):
        assert r["row_id"].startswith(stem) and r["curve_id"].startswith(stem), r["row_id"]
        assert r["row_id"].startswith(r["curve_id"]), r["row_id"]
