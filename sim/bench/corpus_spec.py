"""Speculative decoding of a serving-corpus row: the acceptance its source states, read from the side table
benchmarks/serving/side_tables/spec_acceptance.csv (columns in benchmarks/serving/README.md), and the engine's
`speculative` block it becomes. The one rule: `sim.bench.corpus.point_from_row` (so `predict_row`) and the serving
fit's load points (calibrate/serving/rows.py, which imports these names back) both apply it.

A row's run is priced as speculative only where the table states its acceptance (`stated` = yes) for the row's
curve at the row's load point, or per run (load empty: every point of the curve); anything else is priced
without a speculative block."""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

from sim.bench.corpus_cells import cell_number as _num
from sim.errors import ConfigError

#: the side table (absent in an installed copy without the benchmarks folder: then nothing is stated)
SPEC_TABLE = Path(__file__).resolve().parents[2] / "benchmarks" / "serving" / "side_tables" / "spec_acceptance.csv"
#: the table's `method` -> the speculative cost model's method (sim.catalog.engine_settings.SpeculativeSettings)
SPEC_METHODS = {"eagle3": "eagle", "eagle": "eagle", "mtp": "mtp", "nextn": "mtp"}

_CACHE: dict[str, dict] = {}


def load_spec_acceptance(path: Path | str | None = None) -> dict[str, list[dict]]:
    """The side table by curve_id: the acceptance a speculative curve's source states (rows with stated = yes,
    per load point or, with load empty, per run), or where it was looked for and not found (stated = no).
    `path`: default SPEC_TABLE; a missing file is an empty table; a rewritten file is re-read."""
    path = Path(SPEC_TABLE if path is None else path)
    st = path.stat() if path.exists() else None
    key = f"{path}:{st.st_mtime_ns if st else 0}:{st.st_size if st else 0}"
    if key in _CACHE:
        return _CACHE[key]
    out: dict[str, list[dict]] = defaultdict(list)
    if st is not None:
        with path.open(newline="", encoding="utf-8") as fh:
            for r in csv.DictReader(fh):
                out[r["curve_id"]].append(r)
    _CACHE[key] = dict(out)
    return _CACHE[key]


def row_load(row: Mapping) -> tuple[str, float | None]:
    """(load_kind, load) of a corpus row: C (`max_concurrency`, None when blank) for a closed loop, R
    (`request_rate`, inf when blank) for an open one; the key a load point and a side-table row share."""
    kind = (row.get("load_kind") or "concurrency").strip()
    load = _num(row.get("max_concurrency")) if kind == "concurrency" else _num(row.get("request_rate"), math.inf)
    return kind, load


def stated_entry(row: Mapping, table: dict[str, list[dict]] | None = None, curve_id: str | None = None) -> dict | None:
    """The stated acceptance row (stated = yes) of the table (default `load_spec_acceptance()`) for a corpus row's
    curve (`curve_id`, default the row's) at its load point (`row_load`; a per-run entry, load empty, stands for
    every point), or None."""
    table = load_spec_acceptance() if table is None else table
    kind, load = row_load(row)
    for e in table.get(row.get("curve_id") if curve_id is None else curve_id, []):
        if (e.get("stated") or "").strip() != "yes":
            continue
        el = _num(e.get("load"))
        if el is None or ((e.get("load_kind") or "").strip() == kind and load is not None and math.isclose(el, load)):
            return e
    return None


def spec_stated(curve: list[dict], table: dict[str, list[dict]] | None = None) -> dict[tuple, dict]:
    """{(load_kind, load): the stated acceptance row} for every load point of a curve whose acceptance its
    source states (`stated_entry` of each of its rows, under the curve's id: its first row's)."""
    table = load_spec_acceptance() if table is None else table
    out = {}
    for r in curve:
        e = stated_entry(r, table, curve[0]["curve_id"])
        if e is not None:
            out[row_load(r)] = e
    return out


def iid_acceptance(mean_acceptance_length: float, k: int) -> float:
    """The per-token acceptance a, i.i.d. per drafted token, whose expected tokens per verify step
    (1 - a^(k+1)) / (1 - a) (Leviathan et al. 2023, arXiv 2211.17192, eq. 1; what
    `sim.cost.speculative.expected_tokens_per_step` prices) equals a stated mean acceptance length L.

    vLLM's `spec_decode_acceptance_length` is 1 + accepted / drafts (the target's own token plus the
    accepted drafts per verify step; = 1 + the sum of its per-position rates) and SGLang's "accept
    len" the same count, so matching L reproduces the tokens each step yields exactly, whatever the
    per-position shape (only their sum moves the simulated step). Bisection on a in [0, 1]; L <= 1
    is a = 0, L >= k + 1 is a = 1."""
    from sim.cost.speculative import expected_tokens_per_step

    target = float(mean_acceptance_length)
    if target <= 1.0:
        return 0.0
    if target >= k + 1.0:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if expected_tokens_per_step(mid, k) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def spec_override(entry: Mapping) -> dict:
    """The engine's `speculative` block (sim.catalog.engine_settings.SpeculativeSettings) for a stated
    acceptance row: method (EAGLE-3 heads, Li et al. 2025, arXiv 2503.01840, priced as `eagle`: a
    head of `draft_cost_fraction` x a target decode step per drafted token; MTP modules, DeepSeek-V3, arXiv
    2412.19437, priced from the model's own `mtp_layers` unless the row gives a fraction), k = num_speculative_tokens
    (vLLM `--speculative-config`), and the i.i.d. acceptance matching the stated mean acceptance length.
    A method the cost model does not price is a one-line error naming it."""
    method = (entry.get("method") or "").strip().lower()
    if method not in SPEC_METHODS:
        raise ConfigError(f"speculative method {method!r} not modelled (known: {', '.join(SPEC_METHODS)})",
                          file=entry.get("curve_id"), field="method")
    k = int(_num(entry.get("num_speculative_tokens")))
    out = {"method": SPEC_METHODS[method], "k": k,
           "acceptance_rate": round(iid_acceptance(_num(entry.get("mean_acceptance_length")), k), 9)}
    if _num(entry.get("draft_cost_fraction")) is not None:
        out["draft_cost_fraction"] = _num(entry.get("draft_cost_fraction"))
    # not priced: an EAGLE head's own weights (`draft_weight_gib`) beside the KV cache (the speculative
    # settings have no field for them; `SpeculativeCostModel.extra_weight_bytes` counts draft models' and MTP's)
    return out


def row_speculative(row: Mapping, table: dict[str, list[dict]] | None = None) -> dict:
    """{"speculative": block} for a corpus row whose acceptance the table states (`stated_entry`, `spec_override`),
    else {}: the engine overrides it adds to the row's own."""
    e = stated_entry(row, table)
    return {} if e is None else {"speculative": spec_override(e)}
