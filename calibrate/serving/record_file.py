"""Reading a rule record: a JSON file of figures recorded from a run the serving fit does not repeat
(benchmarks/serving/*_rule.json, schema infersim-rule-record-1; read by calibrate/serving/eagerlaunch.py,
eager_backends_rule.py and floorkind.py, each with the fields its rule and report section need)."""

from __future__ import annotations

import json
from pathlib import Path


def read_json(path: Path | str) -> dict:
    """The record file's JSON, unchecked (for a reader whose `need` depends on what the file holds)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def read_record(path: Path | str, need: list[tuple[str, ...]], may_be_empty: tuple[str, ...] = (),
                rec: dict | None = None) -> dict:
    """The record at `path` (or `rec`, already read from it), checked to hold every key path in `need` (each a
    tuple of nested keys) with a value that is not None, "", [] or {} (an empty value allowed for the keys
    named in `may_be_empty`): a ValueError naming the file and the first missing field otherwise."""
    rec = read_json(path) if rec is None else rec
    for keys in need:
        v = rec
        for k in keys:
            if not isinstance(v, dict) or v.get(k) is None or (v[k] in ("", [], {}) and k not in may_be_empty):
                raise ValueError(f"{path}: no {'.'.join(keys)}")
            v = v[k]
    return rec
