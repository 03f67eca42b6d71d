"""The kernel-level corpus (benchmarks/public/*.csv): no row cites a reserved outside check, every
row of an issue 39 part names a source a reader can open, and the TensorRT-LLM v1.0 perf-overview rows
of the new parts are what their builder reads off the tables it keeps as printed.
"""

from __future__ import annotations

import csv
import importlib.util
import re
from pathlib import Path

from calibrate.public_corpus import corpus_files, default_corpus_dir
from calibrate.public_report import ISSUE39_DEVICES

ROOT = Path(__file__).resolve().parents[1]
# Reserved as outside checks (HELPER_BRIEF / STYLE): never the source of a corpus row.
RESERVED = [
    re.compile(p, re.I) for p in (
        r"mlcommons", r"mlperf", r"accelmark", r"rapid[-_ ]?mlx",
        r"docs\.nvidia\.com/nim/.*benchmark", r"nvidia\.com/.*nim.*benchmark",
    )
]
# a source pinned to what a reader will find: a file at a 40-hex commit, a discussion / PR / issue
# comment, or a committed raw log of this repository
PINNED = re.compile(r"(/blob/[0-9a-f]{40}/|/discussions/\d+|/pull/\d+|/issues/\d+|^repo:)")


def _records():
    for path in corpus_files(default_corpus_dir()):
        with path.open(newline="", encoding="utf-8") as fh:
            for lineno, rec in enumerate(csv.DictReader(fh), 2):
                yield path.name, lineno, rec


def test_no_corpus_row_cites_a_reserved_source():
    n = 0
    for name, lineno, rec in _records():
        n += 1
        for field in ("source", "source_ref", "notes"):
            for pat in RESERVED:
                assert not pat.search(rec[field] or ""), \
                    f"{name}:{lineno} ({rec['row_id']}): {field} cites a reserved source ({pat.pattern})"
    assert n > 1000


def test_every_issue39_row_names_a_source_a_reader_can_open():
    rows = [rec for _, _, rec in _records() if rec["device"] in ISSUE39_DEVICES]
    # 36 Strix Halo + 12 set-aside GDDR7 scoreboard rows + 100 TensorRT-LLM v1.0 + 8 Jetson AI Lab (Thor)
    assert len(rows) >= 156
    for r in rows:
        assert PINNED.search(r["source"]), f"{r['row_id']}: source not pinned to a commit or a thread: {r['source']}"
        assert r["as_printed"].strip(), f"{r['row_id']}: as_printed empty"


def _builder(name: str = "build_public_new_devices_2026"):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_new_devices_2026_csv_is_what_its_builder_writes():
    b = _builder()
    assert b.OUT.read_text(encoding="utf-8") == b.render(), \
        "benchmarks/public/new_devices_2026.csv differs: run python benchmarks/build_public_new_devices_2026.py"


def test_new_devices_2026_values_are_the_printed_cells():
    """Each value is the number its as_printed cell shows, and that cell is in the table the builder
    keeps verbatim, on the row of the row's ISL/OSL; per device the counts are those of the tables."""
    b = _builder()
    rows = [rec for _, _, rec in _records() if rec["row_id"].startswith("trtllm-v1.0-") and rec["quant"] == "nvfp4"]
    counts: dict[str, int] = {}
    for r in rows:
        rid = r["row_id"]
        assert r["source"] == b.SOURCE, rid
        table, rest = r["as_printed"].split(" table | ", 1)
        lengths, cell = rest.split(" | ", 1)
        assert lengths == f"{r['input_tokens']}/{r['output_tokens']}", rid
        printed = cell.rsplit(": ", 1)[1]
        assert float(printed.replace(",", "")) == float(r["value"]), rid
        lines = [ln for ln in b.TABLES[table].splitlines() if ln.startswith(f"| {lengths} |")]
        assert len(lines) == 1 and f"| {printed} |" in lines[0], rid
        counts[r["device"]] = counts.get(r["device"], 0) + 1
    assert counts == {"b200": 40, "gb200": 40, "rtx-pro-6000": 20}


def test_jetson_thor_csv_is_what_its_builder_writes():
    b = _builder("build_public_jetson_thor")
    assert b.OUT.read_text(encoding="utf-8") == b.render(), \
        "benchmarks/public/jetson_thor.csv differs: run python benchmarks/build_public_jetson_thor.py"


def test_jetson_thor_values_are_the_printed_json_fields():
    """Each Thor row's value is the JSON field its as_printed names, of the model it names, at the
    concurrency that is its batch; every row cites the data file at the pinned commit."""
    import json

    b = _builder("build_public_jetson_thor")
    data = {e["modelName"]: e["thor"] for e in json.loads(b.BENCHMARKS_JSON)}
    rows = [rec for _, _, rec in _records() if rec["row_id"].startswith("jetson-ai-lab-thor-")]
    assert len(rows) == 8
    for r in rows:
        assert r["device"] == "jetson-agx-thor" and r["source"] == b.SOURCE and b.COMMIT in r["source"]
        name, field = r["as_printed"].split(" | ", 1)
        key = f"concurrency{r['batch']}"
        assert f'"{key}": ' in field, r["row_id"]
        assert float(r["value"]) == float(data[name][key]), r["row_id"]
        assert (r["input_tokens"], r["output_tokens"], r["metric"]) == ("2048", "128", "serving")
