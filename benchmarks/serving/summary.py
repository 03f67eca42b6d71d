#!/usr/bin/env python3
"""Print what the serving corpus holds: rows and curves per engine x device, rows per quantity,
and the totals (files, rows, curves, engines, devices, models, publishers).

    python benchmarks/serving/summary.py                 # markdown tables on stdout
    python benchmarks/serving/summary.py --write-readme  # also refresh README.md's Summary block

The README block sits between the markers SUMMARY_BEGIN / SUMMARY_END (HTML comments); rerun with
--write-readme after adding a CSV (e.g. after merging another collector's files).
"""
from __future__ import annotations

import csv
import sys
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
QUANTITIES = ["ttft_ms", "tpot_ms", "itl_ms", "e2el_ms", "output_tps", "total_tps", "request_tps",
              "tps_per_user"]


def load(folder: Path = HERE) -> list[dict]:
    rows = []
    for path in sorted(folder.glob("*.csv")):
        with path.open(newline="", encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                row["_file"] = path.name
                rows.append(row)
    return rows


def summarize(rows: list[dict]) -> str:
    out = []
    curves = {r["curve_id"] for r in rows}
    out.append(f"{len({r['_file'] for r in rows})} files, {len(rows)} rows, {len(curves)} curves; "
               f"engines: {', '.join(sorted({r['engine'] for r in rows}))}; "
               f"devices: {', '.join(sorted({r['device'] for r in rows}))}; "
               f"{len({r['model'] for r in rows})} models; "
               f"publishers: {', '.join(sorted({r['publisher'] for r in rows}))}.")
    out.append("")
    # engine x device: rows, curves, load points, rows per quantity
    cell_rows: dict = Counter()
    cell_curves: dict = defaultdict(set)
    cell_q: dict = defaultdict(Counter)
    for r in rows:
        key = (r["engine"], r["device"])
        cell_rows[key] += 1
        cell_curves[key].add(r["curve_id"])
        cell_q[key][r["quantity"]] += 1
    used_q = [q for q in QUANTITIES if any(cell_q[k][q] for k in cell_q)]
    out.append("| engine | device | curves | rows | " + " | ".join(used_q) + " |")
    out.append("|---|---|---:|---:|" + "---:|" * len(used_q))
    for key in sorted(cell_rows):
        out.append(f"| {key[0]} | {key[1]} | {len(cell_curves[key])} | {cell_rows[key]} | "
                   + " | ".join(str(cell_q[key][q] or "") for q in used_q) + " |")
    out.append("")
    # per file
    out.append("| file | rows | curves | load kinds |")
    out.append("|---|---:|---:|---|")
    for name in sorted({r["_file"] for r in rows}):
        fr = [r for r in rows if r["_file"] == name]
        kinds = Counter(r["load_kind"] for r in fr)
        out.append(f"| {name} | {len(fr)} | {len({r['curve_id'] for r in fr})} | "
                   + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) + " |")
    out.append("")
    # curves: load points and span
    out.append("| curve | engine | device | model | load points |")
    out.append("|---|---|---|---|---|")
    loads: dict = defaultdict(set)
    first: dict = {}
    for r in rows:
        load = r["max_concurrency"] if r["load_kind"] == "concurrency" else r["request_rate"]
        loads[r["curve_id"]].add(load)
        first.setdefault(r["curve_id"], r)
    for cid in sorted(loads):
        r = first[cid]
        pts = sorted(loads[cid], key=lambda x: float(x))
        prefix = "C=" if r["load_kind"] == "concurrency" else "R="
        out.append(f"| {cid} | {r['engine']} | {r['device']} | {r['model']} | "
                   f"{prefix}{','.join(pts)} |")
    return "\n".join(out)


BEGIN, END = "<!-- SUMMARY_BEGIN (summary.py --write-readme) -->", "<!-- SUMMARY_END -->"


def write_readme(text: str, readme: Path = HERE / "README.md") -> None:
    doc = readme.read_text(encoding="utf-8")
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{readme}: no {BEGIN} ... {END} block to replace")
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}", encoding="utf-8")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    rows = load()
    if not rows:
        print(f"no CSV files in {HERE}", file=sys.stderr)
        return 2
    text = summarize(rows)
    print(text)
    if "--write-readme" in argv:
        write_readme(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
