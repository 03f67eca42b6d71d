"""The serving-fit CLIs (benchmarks/serving_fit.py, benchmarks/eager_backends_subset.py) loaded as modules, and with
their fit stubbed: tests check what `main` passes to `run` without replaying anything."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
CLI = BENCHMARKS / "serving_fit.py"
SUBSET_CLI = BENCHMARKS / "eager_backends_subset.py"


class Stop(Exception):
    """Raised by the stubbed `run` once it has recorded its keyword arguments."""


def load_cli(name: str = "serving_fit_cli", script: Path = CLI):
    """`script` (default benchmarks/serving_fit.py) as a fresh module named `name`."""
    spec = importlib.util.spec_from_file_location(name, script)
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    return cli


def stubbed_cli(monkeypatch, name: str = "serving_fit_cli", script: Path = CLI):
    """(the CLI module, the list of keyword-argument dicts its `run` received): `run` records them and raises Stop,
    the corpus is one row of curve "x" and there is no cache."""
    cli = load_cli(name, script)
    seen: list[dict] = []

    def fake_run(rows, **kw):
        seen.append(kw)
        raise Stop
    monkeypatch.setattr(cli.sf, "run", fake_run)
    monkeypatch.setattr(cli.sf, "Cache", lambda path: None)
    monkeypatch.setattr(cli.sf, "load_corpus", lambda: [{"curve_id": "x"}])
    return cli, seen
