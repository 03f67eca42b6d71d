"""Reading a serving-corpus CSV in the tests (benchmarks/serving/*.csv): its rows, checked against the schema's
columns, and the rows grouped by curve."""
from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path


def schema_rows(path: Path, columns: list[str]) -> list[dict]:
    """The CSV's rows as dicts; asserts its header is the schema's `columns`, in order."""
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == columns, f"{path.name}: columns differ from the schema"
        return list(reader)


def by_curve(rows: list[dict]) -> dict[str, list[dict]]:
    """{curve_id: its rows, in file order}."""
    out: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        out[r["curve_id"]].append(r)
    return dict(out)
