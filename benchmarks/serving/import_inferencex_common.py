"""What the InferenceX/GPUStack importers share (`import_inferencex.py` runs them): the paths, exact
number text, GitHub addresses and the empty corpus row."""
from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE / "sources"

from schema import COLUMNS  # noqa: E402 (this folder is on sys.path when run as a script)

IX_REPO = "SemiAnalysisAI/InferenceX"


def dec_str(d: Decimal) -> str:
    """A Decimal as plain text without exponent or trailing zeros (exact, no rounding)."""
    s = format(d.normalize(), "f")
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return s


def load_json_raw(path: Path) -> dict:
    """Parse JSON keeping every number's original text (no float round-trip)."""
    return json.loads(path.read_text(), parse_float=str, parse_int=str)


def gh(owner_repo: str, commit: str, path: str) -> str:
    return f"https://github.com/{owner_repo}/blob/{commit}/{path}"


def base_row(**kw) -> dict:
    row = {c: "" for c in COLUMNS}
    row.update({k: ("" if v is None else str(v)) for k, v in kw.items()})
    return row
