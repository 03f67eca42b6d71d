"""benchmarks/inferencex_split.py reads the committed residual rows the way the report scores them: its per-source
medians are the report's per-source table's (benchmarks/serving_fidelity.json heldout_by_source.by_source), and its
groups partition each source's rows. benchmarks/inferencex_whatif.py's release test reads vLLM versions as the rule
(docs/inferencex-misses.md H1) states."""

import importlib.util
import statistics as st
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_split_medians_are_the_reports():
    ix = _load("inferencex_split")
    rows, d = ix.load("by_source")
    for src in ix.SOURCES:
        rep = d["heldout_by_source"]["by_source"][src]
        for m in ix.METRICS:
            e = [r["err"] for r in rows if r["src"] == src and r["metric"] == m]
            assert len(e) == rep[m]["n"]
            assert round(100 * st.median([abs(x) for x in e]), 1) == rep[m]["median_abs_pct"]


def test_groups_partition_each_source():
    ix = _load("inferencex_split")
    rows, _ = ix.load("by_source")
    for key in ix.GROUPINGS.values():
        for src in ix.SOURCES:
            rs = [r for r in rows if r["src"] == src]
            assert sum(sum(1 for r in rs if key(r) == g) for g in {key(r) for r in rs}) == len(rs)


def test_async_release():
    w = _load("inferencex_whatif")
    assert w.async_release("0.22.0") and w.async_release("v0.14.1") and w.async_release("nightly wheel dea63512bb9b")
    assert not w.async_release("0.13.0+faa43dbf.nv26.01") and not w.async_release("v0.9.2")
    assert w.async_release("unknown") is None
