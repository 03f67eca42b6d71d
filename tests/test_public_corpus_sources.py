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
PINNED = re.compile(r"(/blob/[0-9a-f]{40}/|/discussions/\d+|/pull/\d+|/issues/\d+|^repo:"
                    # a release's own documentation page (frozen with the release: the B300 rows' source)
                    r"|^https://nvidia\.github\.io/TensorRT-LLM/\d+\.\d+\.\d+/)")


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
    # + 19 TensorRT-LLM 1.2 (B300) + 47 Apple M5 (mac-llm-bench mlx, llama.cpp PR #16634) + 2 M5 Max (Mac-MLX)
    # + 33 TensorRT-LLM 1.2 (GB300; B200 / GB200 gpt-oss MXFP4)
    assert len(rows) >= 257
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


def _printed_cell(b, r: dict) -> tuple[str, str, str]:
    """A perf-overview row's (table, table line, printed cell): its as_printed names a table the builder `b` keeps
    verbatim, a line of it for the row's ISL/OSL, and a cell whose number is the row's value."""
    rid = r["row_id"]
    assert r["source"] == b.SOURCE, rid
    table, rest = r["as_printed"].split(" table | ", 1)
    lengths, cell = rest.split(" | ", 1)
    assert lengths == f"{r['input_tokens']}/{r['output_tokens']}", rid
    printed = cell.rsplit(": ", 1)[1]
    assert float(printed.replace(",", "")) == float(r["value"]), rid
    lines = [ln for ln in b.TABLES[table].splitlines() if ln.startswith(f"| {lengths} |")]
    assert len(lines) == 1, rid
    return table, lines[0], printed


def test_new_devices_2026_values_are_the_printed_cells():
    """Each value is the number its as_printed cell shows, and that cell is in the table the builder
    keeps verbatim, on the row of the row's ISL/OSL; per device the counts are those of the tables."""
    b = _builder()
    rows = [rec for _, _, rec in _records() if rec["row_id"].startswith("trtllm-v1.0-") and rec["quant"] == "nvfp4"]
    counts: dict[str, int] = {}
    for r in rows:
        _, line, printed = _printed_cell(b, r)
        assert f"| {printed} |" in line, r["row_id"]
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


def test_b300_csv_is_what_its_builder_writes():
    b = _builder("build_public_b300")
    assert b.OUT.read_text(encoding="utf-8") == b.render(), \
        "benchmarks/public/b300.csv differs: run python benchmarks/build_public_b300.py"


def test_b300_values_are_the_printed_cells_of_the_b300_column():
    """Each B300 row's value is its as_printed cell, that cell is in the B300 TP1 column of the table the
    builder keeps verbatim on the row of its ISL/OSL, and every non-empty cell of that column is a row."""
    b = _builder("build_public_b300")
    rows = [rec for _, _, rec in _records() if rec["device"] == "b300"]
    assert len(rows) == 19
    for r in rows:
        rid = r["row_id"]
        assert PINNED.search(r["source"]), rid
        table, line, printed = _printed_cell(b, r)
        col = b._cells(b.TABLES[table].strip().splitlines()[0]).index(b.COLUMN)
        assert b._cells(line)[col] == printed, rid
        assert (r["n_devices"], r["metric"], r["engine"]) == ("1", "offline", "trtllm"), rid
    per_table = {t: sum(1 for ln in text.strip().splitlines()[1:]
                        if b._cells(ln)[b._cells(text.strip().splitlines()[0]).index(b.COLUMN)])
                 for t, text in b.TABLES.items()}
    assert sum(per_table.values()) == 19


def test_apple_m5_csv_is_what_its_builder_writes():
    b = _builder("build_public_apple_m5")
    assert b.OUT.read_text(encoding="utf-8") == b.render(), \
        "benchmarks/public/apple_m5.csv differs: run python benchmarks/build_public_apple_m5.py"


def test_apple_m5_values_are_the_printed_fields():
    """An mlx row's value is the `speed` field its as_printed names in the file its source names (at the
    pinned commit), its lengths those of the runner's run that wrote that field; a llama.cpp row's value is
    the t/s cell of the PR table line it quotes."""
    import json

    b = _builder("build_public_apple_m5")
    rows = [rec for _, _, rec in _records() if rec["device"] in ("apple-m5", "apple-m5-max")]
    assert len(rows) == 49
    macmlx = json.loads(b.MACMLX_JSON)
    for r in rows:
        rid = r["row_id"]
        if r["engine"] == "mlx" and r["device"] == "apple-m5":
            assert b.COMMIT in r["source"] and r["source"].endswith("_4bit_ngl99.json"), rid
            name = r["source"].rsplit("/", 1)[1].removesuffix("_4bit_ngl99.json")
            key, printed = r["as_printed"].split(": ")
            key = key.strip('"')
            assert float(printed) == float(r["value"]) == json.loads(b.MLX_SPEED[name])[key], rid
            metric, p, g = b.KEYS[key]
            assert r["metric"] == metric, rid
            if metric == "pp":
                assert (r["input_tokens"], r["output_tokens"], r["depth"]) == (str(p), "0", "0"), rid
            else:
                assert (r["input_tokens"], r["output_tokens"], r["depth"]) == ("0", str(g), str(p)), rid
        elif r["device"] == "apple-m5-max":
            assert r["source"] == b.MACMLX, rid
            key = "promptTPS" if r["metric"] == "pp" else "generationTPS"
            assert r["as_printed"].startswith(f'"{key}" : ') and float(r["value"]) == macmlx[key], rid
            lengths = (r["input_tokens"], r["output_tokens"], r["depth"])
            assert lengths == ((str(macmlx["promptTokens"]), "0", "0") if r["metric"] == "pp" else
                               ("0", str(macmlx["completionTokens"]), str(macmlx["promptTokens"]))), rid
        else:
            assert r["source"] == b.PR and r["as_printed"] in b.PR_TABLE, rid
            assert float(r["as_printed"].split("|")[6].split("±")[0]) == float(r["value"]), rid


def test_b300_and_m5_rows_are_set_aside_and_reported_under_their_transfer():
    """Fitted, these rows moved the devices before issue 39 (round 29): every one carries the set-aside
    mark, so the fit leaves the profiles as they were, and the report gives their error under the
    shipped transfers beside the Thor's."""
    import json

    rows = [rec for _, _, rec in _records() if rec["device"] in ("b300", "apple-m5", "apple-m5-max")]
    assert rows and all(r["notes"].startswith("Set aside:") for r in rows)
    report = json.loads((ROOT / "benchmarks" / "public_fidelity.json").read_text(encoding="utf-8"))
    sets = report["lodo_by_device_set"]
    for name, n in (("b300 (trtllm)", 19), ("apple-m5 (mlx)", 45), ("apple-m5 (ggml)", 2), ("apple-m5-max (mlx)", 2)):
        key = f"{name}, set-aside rows under its shipped transfer"
        assert sets[key]["all"]["n"] == n, key


def test_gb300_and_b200_gb200_mxfp4_csvs_are_what_their_builders_write():
    for name in ("build_public_gb300", "build_public_trtllm12_mxfp4"):
        b = _builder(name)
        assert b.OUT.read_text(encoding="utf-8") == b.render(), f"{b.OUT.name} differs: run python benchmarks/{name}.py"


def test_gb300_and_mxfp4_values_are_the_printed_cells_of_their_tp1_columns():
    """Each row's value is its as_printed cell, in the column of its device in the table the B300 builder keeps
    verbatim (one copy of the page), on the row of its ISL/OSL; the counts are the columns' non-empty cells."""
    gb300, mx = _builder("build_public_gb300"), _builder("build_public_trtllm12_mxfp4")
    columns = {"gb300": gb300.COLUMN, **{device: col for col, device, _ in mx.COLUMNS}}
    rows = [rec for _, _, rec in _records() if rec["row_id"].startswith("trtllm-v1.2-") and rec["device"] != "b300"]
    counts: dict[str, int] = {}
    for r in rows:
        table, line, printed = _printed_cell(gb300, r)
        header = gb300.page._cells(gb300.TABLES[table].strip().splitlines()[0])
        assert gb300.page._cells(line)[header.index(columns[r["device"]])] == printed, r["row_id"]
        assert (r["n_devices"], r["metric"], r["engine"]) == ("1", "offline", "trtllm"), r["row_id"]
        assert r["device"] == "gb300" or r["quant"] == "mxfp4", r["row_id"]
        counts[r["device"]] = counts.get(r["device"], 0) + 1
    assert counts == {"gb300": 18, "b200": 5, "gb200": 10}  # the B200's gpt-oss-120b column is DEP2: not taken


def test_gb300_and_mxfp4_rows_are_set_aside_and_reported_without_moving_the_devices_before_issue_39():
    import json

    rows = [rec for _, _, rec in _records() if rec["row_id"].startswith("trtllm-v1.2-") and rec["device"] != "b300"]
    assert rows and all(r["notes"].startswith("Set aside:") for r in rows)
    sets = json.loads((ROOT / "benchmarks" / "public_fidelity.json").read_text(encoding="utf-8"))["lodo_by_device_set"]
    for name, n in (("gb300 (trtllm)", 18), ("b200 (trtllm)", 5), ("gb200 (trtllm)", 10)):
        assert sets[f"{name}, set-aside rows under its shipped transfer"]["all"]["n"] == n, name
    before = sets["devices profiled before issue 39"]["all"]
    assert (before["n"], round(100 * before["median"], 2), round(100 * before["p90"], 2)) == (1234, 8.40, 24.55)
