"""Reading a serving-corpus cell (benchmarks/serving/README.md): whether it states anything and its number.
The lowest piece of the corpus readers (sim.bench.corpus, sim.bench.corpus_spec), which both import it."""

from __future__ import annotations


def blank(v) -> bool:
    """A corpus cell that states nothing (empty, `not stated`, `unknown`, `none`, any case)."""
    return v is None or str(v).strip().lower() in ("", "not stated", "unknown", "none")


def cell_number(v, default=None) -> float | None:
    """A cell's number, `default` when it is blank or not a number (a lenient read)."""
    if blank(v):
        return default
    try:
        return float(str(v).strip())
    except ValueError:
        return default
