"""Shared helpers for the corpus-b serving collections (sglang.csv, trtllm.csv,
amd_rocm.csv, dgx_spark_mac.csv).

Only the standard library: the scripts beside this file turn published benchmark
text (read from a fetched git snapshot, or transcribed into the script with the
figure exactly as printed) into rows of the serving-corpus schema
(benchmarks/serving/README.md). They never download anything.
"""
from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from schema import COLUMNS  # noqa: F401 (the build scripts run from this folder)

# The lines of a `sglang.bench_serving` / `vllm bench serve` "Serving Benchmark Result"
# block that carry a serving metric, mapped to (quantity, statistic). Units: the
# printed unit is the schema's unit (ms for latencies, tok/s and req/s for
# throughputs), so no conversion is needed for these.
BENCH_LINES = {
    "Request throughput (req/s)": ("request_tps", "value"),
    "Output token throughput (tok/s)": ("output_tps", "value"),
    "Total token throughput (tok/s)": ("total_tps", "value"),
    "Total Token throughput (tok/s)": ("total_tps", "value"),
    "Mean E2E Latency (ms)": ("e2el_ms", "mean"),
    "Median E2E Latency (ms)": ("e2el_ms", "median"),
    "P99 E2E Latency (ms)": ("e2el_ms", "p99"),
    "Mean TTFT (ms)": ("ttft_ms", "mean"),
    "Median TTFT (ms)": ("ttft_ms", "median"),
    "P99 TTFT (ms)": ("ttft_ms", "p99"),
    "Mean TPOT (ms)": ("tpot_ms", "mean"),
    "Median TPOT (ms)": ("tpot_ms", "median"),
    "P99 TPOT (ms)": ("tpot_ms", "p99"),
    "Mean ITL (ms)": ("itl_ms", "mean"),
    "Median ITL (ms)": ("itl_ms", "median"),
    "P95 ITL (ms)": ("itl_ms", "p95"),
    "P99 ITL (ms)": ("itl_ms", "p99"),
}

_LINE = re.compile(r"^\s*([A-Za-z0-9 ()/.\-]+?):\s+(\S.*?)\s*$")


def parse_bench_block(text: str) -> dict[str, str]:
    """Every `Label: value` line of a bench-serving result block, label -> value as printed."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            out.setdefault(m.group(1).strip(), m.group(2).strip())
    return out


def num(s: str) -> float:
    """A printed number (thousands separators allowed) as a float."""
    return float(s.replace(",", ""))


def fmt(x: float) -> str:
    """A value for the CSV: as few digits as represent it (no float noise)."""
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return repr(round(x, 6)).rstrip("0").rstrip(".") if "e" not in repr(x) else repr(x)


def slug(s: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", s.lower()).strip("-")


def csv_text(rows: list[dict], name: str) -> str:
    """The CSV text of `rows` in the schema's column order; a row lacking a column, or a repeated row_id,
    is an error naming the file `name`."""
    ids = set()
    for r in rows:
        missing = [c for c in COLUMNS if c not in r]
        if missing:
            raise ValueError(f"{name}: row {r.get('row_id')} lacks {missing}")
        if r["row_id"] in ids:
            raise ValueError(f"{name}: duplicate row_id {r['row_id']}")
        ids.add(r["row_id"])
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({c: r[c] for c in COLUMNS})
    return buf.getvalue()


def write_csv(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        f.write(csv_text(rows, path.name))


def build_main(build, out_default: Path, script: str, doc: str, what: str = "") -> None:
    """The build scripts' command line: write the CSV `build()` renders to --out (default `out_default`), or with
    --check exit non-zero, naming the file, when the file on disk differs from it (`what`: what it is built from)."""
    import argparse
    import sys
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help=f"fail when {out_default.name} differs from what {script} builds")
    ap.add_argument("--out", default=str(out_default))
    a = ap.parse_args()
    text = build()
    out = Path(a.out)
    if a.check:
        if not out.exists() or out.read_text(encoding="utf-8") != text:
            sys.exit(f"{out}: differs from what {script} builds{what}; rerun it")
        return
    out.write_text(text, encoding="utf-8")
    print(f"{out}: {text.count(chr(10)) - 1} rows")
