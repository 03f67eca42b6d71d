"""A trace importer in one file (the docs/contributing.md recipe; tests/test_extension_names.py drops
it into workloads/formats/ and converts a file with it): `seconds|prompt|output` lines after a
`#pipe` header — a made-up format, the smallest one that shows every part of an importer."""

from pathlib import Path

import numpy as np

from sim.errors import ConfigError
from workloads.importers import SourceTrace, register_format


def read_pipe(path: Path) -> SourceTrace:
    rows = []
    for lineno, text in enumerate(Path(path).read_text().splitlines(), start=1):
        if lineno == 1 or not text.strip():
            continue
        parts = text.split("|")
        if len(parts) != 3:
            raise ConfigError(f"expected seconds|prompt|output, got {text!r}", file=path, line=lineno, field="line")
        try:
            rows.append((float(parts[0]), int(parts[1]), int(parts[2]), lineno))
        except ValueError:
            raise ConfigError(f"not a number in {text!r}", file=path, line=lineno, field="line") from None
    t, p, o, line = (np.array(c) for c in zip(*rows)) if rows else ([],) * 4
    return SourceTrace("pipe", np.asarray(p, dtype=np.int64), np.asarray(o, dtype=np.int64),
                       arrival_s=np.asarray(t, dtype=np.float64), source_line=np.asarray(line))


register_format("pipe", read_pipe, csv_columns={"#pipe"})
