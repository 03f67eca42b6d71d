"""Rows of sweep results: one flat record per combination, appended to a JSONL file as it arrives.

`results.jsonl` is the sweep's journal: one JSON object per finished combination (its key, its
fields, `status` = ok or error, the error text, the flattened `infersim run --json` summary and
cost columns). Written and flushed line by line, it survives an interrupted sweep; a half-written
last line (the process killed mid-write) is ignored when read back, and that combination runs
again on `--resume`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from sim.files import atomic_write_text, atomic_write_with, write_error
from sim.plan.sweep import Combination
from sim.plan.workload import display_path

#: Leading columns of the results table, in this order; metric columns follow.
ID_COLUMNS = ["index", "key", "status", "error", "trace", "hw", "model", "quant", "engine",
              "concurrency", "rate_scale", "rate_rps", "offered_rps", "seed", "overrides"]


def flatten_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """`{"ttft_s": {"p90": x}}` -> `{"ttft_s_p90": x}`; the `config` block is kept as JSON text."""
    flat: dict[str, Any] = {}
    for k, v in summary.items():
        if k == "config":
            flat["config_json"] = json.dumps(v, sort_keys=True, default=str)
        elif isinstance(v, dict):
            for sub, x in v.items():
                flat[f"{k}_{sub}"] = ",".join(map(str, x)) if isinstance(x, list) else x
        elif isinstance(v, list):  # per-replica blocks (issue 8): JSON text, not a grid column's name
            flat[f"{k}_json"] = json.dumps(v, sort_keys=True, default=str)
        else:
            flat[k] = v
    return flat


def combination_columns(combo: Combination) -> dict[str, Any]:
    """The identifying columns of a row; each override also gets its own column for grouping."""
    cols: dict[str, Any] = {
        "index": combo.index, "key": combo.key, "trace": display_path(combo.trace), "hw": combo.hw,
        "model": combo.model, "quant": combo.quant, "engine": combo.engine,
        "concurrency": combo.concurrency, "rate_scale": combo.rate_scale, "rate_rps": combo.rate_rps,
        "seed": combo.seed, "overrides": json.dumps(combo.overrides, sort_keys=True),
    }
    for name, value in combo.overrides.items():
        cols[name if name not in cols else f"override_{name}"] = value
    return cols


def judge_slo(frame: pd.DataFrame, slo: dict[str, float | None] | None) -> pd.DataFrame:
    """`slo_met` (True/False; None without an SLO or for a failed row) and `slo_misses` (what
    missed) from each row's TTFT p90 and TPOT p90, against the sweep's `slo:` block. Judged on the
    table, not in the journal, so a resumed sweep with a new SLO is judged by it."""
    frame = frame.copy()
    met: list[bool | None] = []
    misses: list[str | None] = []
    for _, r in frame.iterrows():
        if not slo or r.get("status") != "ok":
            met.append(None)
            misses.append(None)
            continue
        why = []
        for col, limit, label, scale, unit in (("ttft_s_p90", slo.get("ttft_p90_s"), "TTFT p90", 1.0, "s"),
                                               ("tpot_s_p90", slo.get("tpot_p90_s"), "TPOT p90", 1e3, "ms")):
            x = r.get(col)
            if limit is not None and (x is None or x != x or x > limit):
                why.append(f"{label} {'-' if x is None or x != x else format(x * scale, '.3g')} {unit} > {limit * scale:g} {unit}")
        met.append(not why)
        misses.append("; ".join(why) or None)
    frame["slo_met"] = pd.Series(met, index=frame.index, dtype=object)
    frame["slo_misses"] = pd.Series(misses, index=frame.index, dtype=object)
    return frame


def point_status(row) -> str:
    """What the sweep table says of one point: `error`, what is wrong with its figures (an
    overload, a trace too short or too small, a missed SLO), or `ok` only when nothing is."""
    if row.get("status") != "ok":
        return "error"
    from sim.engine.verdict import short_text

    parts = []
    issues = row.get("verdict_issues")
    if isinstance(issues, str) and issues:
        parts.append(short_text({"issues": issues.split(","), "overloaded_from_s": row.get("verdict_overloaded_from_s"),
                                 "percentile": row.get("verdict_percentile")}))
    if row.get("slo_met") is False:
        parts.append("misses SLO")
    return ", ".join(parts) or "ok"


def error_row(combo: Combination, error: str) -> dict[str, Any]:
    return {**combination_columns(combo), "status": "error", "error": error}


class ResultsJournal:
    """Append-only JSONL of finished combinations (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> dict[str, dict[str, Any]]:
        """key -> last row written for it; unreadable (truncated) lines are skipped."""
        rows: dict[str, dict[str, Any]] = {}
        if not self.path.exists():
            return rows
        with self.path.open() as f:
            for line in f:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(row, dict) and "key" in row:
                    rows[row["key"]] = row
        return rows

    def drop_partial_line(self) -> None:
        """Cut a last line left half-written by a killed sweep, so the next row starts on its own line."""
        if not self.path.exists():
            return
        with self.path.open("rb+") as f:
            data = f.read()
            if data and not data.endswith(b"\n"):
                f.truncate(data.rfind(b"\n") + 1)

    def start_fresh(self) -> None:
        atomic_write_text(self.path, "")

    def append(self, row: dict[str, Any]) -> None:
        """One line, flushed and fsynced: a row appended is on disk before the next one starts. The
        journal is the one file not written by rename: appending is what lets it survive a kill,
        and a half-written last line is dropped when it is read back (`drop_partial_line`)."""
        try:
            with self.path.open("a") as f:
                f.write(json.dumps(row, default=_json_default) + "\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            raise write_error(self.path, e) from None


def _json_default(x: Any) -> Any:
    if hasattr(x, "item"):  # numpy scalars
        return x.item()
    return str(x)


def rows_to_frame(rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """One DataFrame, rows in sweep order, identifying columns first. Rows are ordered before the
    frame is built: pandas takes the column order from the rows as they come, and parallel workers
    finish in any order (a column only some rows have, e.g. a block cache's
    `prefix_cache_cached_blocks_at_end`, moved with them)."""
    df = pd.DataFrame(sorted(rows, key=lambda r: r.get("index", -1)))
    if df.empty:
        return pd.DataFrame(columns=ID_COLUMNS)
    for col in ID_COLUMNS:
        if col not in df:
            df[col] = None
    df = df.sort_values("index", kind="stable").reset_index(drop=True)
    rest = [c for c in df.columns if c not in ID_COLUMNS]
    return df[ID_COLUMNS + rest]


def write_tables(df: pd.DataFrame, out_dir: Path) -> tuple[Path, Path]:
    """results.csv and results.parquet. Object columns holding mixed types (an override that is a
    number in one row and text in another) are written as text so Parquet accepts them."""
    csv_path, pq_path = out_dir / "results.csv", out_dir / "results.parquet"
    atomic_write_with(csv_path, lambda p: df.to_csv(p, index=False))
    pq = df.copy()
    for col in pq.columns:
        if pq[col].dtype == object:
            kinds = {type(v) for v in pq[col] if v is not None and not (isinstance(v, float) and math.isnan(v))}
            if len(kinds) > 1:
                pq[col] = pq[col].map(lambda v: None if v is None else str(v))
    atomic_write_with(pq_path, lambda p: pq.to_parquet(p, index=False))
    return csv_path, pq_path
