"""The server flags a curve's rows do not restate, from its publisher's launch recipe
(benchmarks/serving/side_tables/recipe_flags.csv; README 'Recipe flags').

SemiAnalysis' InferenceX PR baseline tables (benchmarks/serving/inferencex_published.csv) print the points but
not the flags; the family's recipe script at the baseline date sets them, some per load (SGLang's
--scheduler-recv-interval 10 below 16 clients and 30 from 16, TensorRT-LLM's batch waiting from 64). A row that
states its own flags keeps them; one with none takes the side table's entry for its curve and load."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from sim.bench.corpus import cell_number

RECIPE_TABLE = Path(__file__).resolve().parents[2] / "benchmarks" / "serving" / "side_tables" / "recipe_flags.csv"
_COLUMNS = ("curve_id", "load_min", "load_max", "engine_flags", "source", "source_ref", "notes")
_CACHE: dict[str, dict[str, list[dict]]] = {}


def load_recipe_flags(path: Path | None = None) -> dict[str, list[dict]]:
    """The side table by curve_id. A missing column or a blank/non-numeric load_min is a one-line error naming
    the file, line and field."""
    path = Path(RECIPE_TABLE if path is None else path)
    key = str(path)
    if key in _CACHE:
        return _CACHE[key]
    out: dict[str, list[dict]] = {}
    if path.exists():
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in _COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise ValueError(f"{path}: missing column {missing[0]}")
            for line, r in enumerate(reader, start=2):
                if cell_number(r["load_min"]) is None:
                    raise ValueError(f"{path}:{line}: load_min: not a number: {r['load_min']!r}")
                if not (r["engine_flags"] or "").strip():
                    raise ValueError(f"{path}:{line}: engine_flags: empty")
                out.setdefault(r["curve_id"], []).append(r)
    _CACHE[key] = out
    return out


def recipe_flags(curve_id: str, load: float, table: dict[str, list[dict]] | None = None) -> str:
    """The recipe's flags for one load point of a curve ('' when the table has none): the entry whose
    [load_min, load_max] holds the load (a blank load_max: no upper end)."""
    table = load_recipe_flags() if table is None else table
    for r in table.get(curve_id, []):
        lo = cell_number(r["load_min"])
        hi = cell_number(r["load_max"], math.inf)
        if lo <= load <= hi:
            return r["engine_flags"]
    return ""
