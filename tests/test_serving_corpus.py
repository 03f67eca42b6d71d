"""Schema checks of the serving corpus (benchmarks/serving/*.csv): columns, vocabularies, load
fields, curves of >= 3 load points, no reserved source, and the import script's CSVs matching the
vendored source files they are made from."""
from __future__ import annotations

import csv
import runpy
import math
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SERVING = ROOT / "benchmarks" / "serving"

# the schema the import and build scripts write (benchmarks/serving/schema.py)
COLUMNS = runpy.run_path(str(SERVING / "schema.py"))["COLUMNS"]
ENGINES = {"vllm", "sglang", "trtllm", "llama.cpp", "ollama", "mlx", "lmstudio", "tgi"}
CLIENTS = {"vllm-bench-serve", "sglang-bench-serving", "aiperf", "genai-perf", "guidellm",
           "trtllm-bench", "custom",
           # one static batch of B requests, not a client feeding a server (notes say which tool ran)
           "vllm-benchmark-latency", "trtllm-static-batch", "llama-batched-bench"}
LATENCIES = {"ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"}
THROUGHPUTS = {"output_tps", "total_tps", "request_tps", "tps_per_user"}
LATENCY_STATS = {"mean", "median", "p90", "p95", "p99", "not stated"}  # a source that prints "latency" without saying which
# devices with no shipped profile yet, allowed under their obvious ids (notes must say so)
NEW_DEVICES = {"b200", "b300", "gb200", "gb300", "mi325x", "mi350x", "mi355x"}
# Reserved as an outside check: never a source of a corpus row.
RESERVED = [
    re.compile(p, re.I) for p in (
        r"mlcommons", r"mlperf", r"accelmark", r"rapid[-_ ]?mlx",
        r"docs\.nvidia\.com/nim/.*benchmark", r"nvidia\.com/.*nim.*benchmark",
    )
]
# the curve's identity: what its rows must share (they differ only in load; each load point
# may sit in its own file or block, so source and source_ref may differ)
CURVE_FIELDS = ("engine", "engine_version", "device", "n_devices", "tp", "model",
                "quant", "client", "dataset", "input_tokens", "output_tokens", "load_kind",
                "publisher")


def _files():
    return sorted(SERVING.glob("*.csv"))


def _rows():
    out = []
    for path in _files():
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            assert reader.fieldnames == COLUMNS, f"{path.name}: columns differ from the schema"
            for lineno, row in enumerate(reader, 2):
                out.append((path.name, lineno, row))
    return out


def _num(text: str) -> float:
    return float(text)


def _profiles() -> set[str]:
    return {p.stem for p in (ROOT / "hardware_profiles").glob("*.yaml")}


def test_corpus_exists_with_curves():
    rows = _rows()
    assert _files(), "no benchmarks/serving/*.csv"
    assert len(rows) >= 300
    assert len({r["curve_id"] for _, _, r in rows}) >= 20


def test_row_ids_unique_across_files():
    seen = {}
    for name, lineno, r in _rows():
        assert r["row_id"], f"{name}:{lineno}: empty row_id"
        assert r["row_id"] not in seen, f"{name}:{lineno}: row_id {r['row_id']} also at {seen[r['row_id']]}"
        seen[r["row_id"]] = f"{name}:{lineno}"


def test_values_vocabularies_and_sources():
    profiles = _profiles()
    for name, lineno, r in _rows():
        where = f"{name}:{lineno} ({r['row_id']})"
        v = _num(r["value"])
        assert math.isfinite(v) and v > 0, f"{where}: value must be a number > 0"
        assert r["as_printed"].strip(), f"{where}: as_printed empty"
        assert r["source"].startswith("https://"), f"{where}: source must be a URL"
        for pat in RESERVED:
            assert not pat.search(r["source"]) and not pat.search(r["source_ref"]), \
                f"{where}: reserved source ({pat.pattern})"
        assert r["engine"] in ENGINES, f"{where}: engine {r['engine']!r}"
        assert r["client"] in CLIENTS, f"{where}: client {r['client']!r}"
        assert r["engine_version"], f"{where}: engine_version empty (write 'unknown')"
        assert r["ignore_eos"] in {"true", "false", "not stated"}, f"{where}: ignore_eos"
        assert r["kv_cache_dtype"], f"{where}: kv_cache_dtype empty (write 'not stated')"
        q, s = r["quantity"], r["statistic"]
        assert q in LATENCIES | THROUGHPUTS, f"{where}: quantity {q!r}"
        if q in LATENCIES:
            assert s in LATENCY_STATS, f"{where}: latency statistic {s!r}"
        else:
            # a run's throughput is one number; per-user throughput may be a statistic over users
            ok = {"value"} | (LATENCY_STATS if q == "tps_per_user" else set())
            assert s in ok, f"{where}: throughput statistic {s!r}"
        n, tp = int(r["n_devices"]), int(r["tp"])
        assert n >= 1 and tp >= 1 and n % tp == 0, f"{where}: n_devices {n} / tp {tp}"
        dev = r["device"]
        assert dev in profiles or dev in NEW_DEVICES, f"{where}: unknown device {dev!r}"
        if dev not in profiles:
            assert dev in r["notes"].lower(), f"{where}: new device id {dev} not explained in notes"
        if r["derivation"]:
            assert r["as_printed"] != r["value"], f"{where}: derivation given for a copied figure"


def test_load_fields_consistent():
    for name, lineno, r in _rows():
        where = f"{name}:{lineno} ({r['row_id']})"
        kind, c, rate = r["load_kind"], r["max_concurrency"], r["request_rate"]
        assert kind in {"concurrency", "rate"}, f"{where}: load_kind {kind!r}"
        if kind == "concurrency":
            assert c.isdigit() and int(c) > 0, f"{where}: concurrency run needs max_concurrency"
            assert rate in {"", "inf"}, f"{where}: closed loop with a finite request_rate"
        else:
            # `inf` = every request sent at once (vllm bench serve's default --request-rate)
            assert rate == "inf" or (rate != "" and _num(rate) > 0), f"{where}: rate run needs request_rate"
            assert c == "" or (c.isdigit() and int(c) > 0), f"{where}: max_concurrency cap"
        if r["burstiness"] not in {"", "inf"}:
            assert _num(r["burstiness"]) > 0, f"{where}: burstiness"


def test_curves_have_three_load_points_and_one_identity():
    loads, ident = defaultdict(set), {}
    for name, lineno, r in _rows():
        cid = r["curve_id"]
        loads[cid].add(r["max_concurrency"] if r["load_kind"] == "concurrency" else r["request_rate"])
        key = tuple(r[f] for f in CURVE_FIELDS)
        if cid in ident:
            assert ident[cid][0] == key, (
                f"{name}:{lineno}: curve {cid} mixes settings with {ident[cid][1]}")
        else:
            ident[cid] = (key, f"{name}:{lineno}")
    # a source's run of one or two loads is kept (its rows still count as points), but the corpus is
    # made of curves: at least 30 of them with >= 3 load points, and thin ones are the exception
    thin = {c: sorted(v) for c, v in loads.items() if len(v) < 3}
    assert len(loads) - len(thin) >= 30, f"only {len(loads) - len(thin)} curves with >= 3 load points"
    assert len(thin) <= 0.05 * len(loads), f"too many curves with fewer than 3 load points: {thin}"


def test_one_row_per_curve_load_quantity_statistic():
    seen = {}
    for name, lineno, r in _rows():
        load = r["max_concurrency"] if r["load_kind"] == "concurrency" else r["request_rate"]
        key = (r["curve_id"], load, r["quantity"], r["statistic"])
        assert key not in seen, f"{name}:{lineno}: same figure as {seen[key]}"
        seen[key] = f"{name}:{lineno}"


def test_import_script_reproduces_committed_csvs():
    proc = subprocess.run(
        [sys.executable, str(SERVING / "import_inferencex.py"), "--check"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("bad", [
    "https://mlcommons.org/benchmarks/inference-datacenter/",
    "https://github.com/mlcommons/inference_results_v5.0/blob/x/y.json",
    "https://docs.nvidia.com/nim/benchmarking/llm/latest/performance.html",
    "https://accelmark.example/leaderboard",
    "https://github.com/someone/rapid-mlx/blob/main/README.md",
])
def test_reserved_patterns_catch_reserved_sources(bad):
    assert any(p.search(bad) for p in RESERVED)


def test_summary_counts_every_row():
    sys.path.insert(0, str(SERVING))
    try:
        import summary  # benchmarks/serving/summary.py
    finally:
        sys.path.pop(0)
    rows = summary.load(SERVING)
    text = summary.summarize(rows)
    assert text.startswith(f"{len(_files())} files, {len(rows)} rows, ")
    assert len(rows) == len(_rows())

