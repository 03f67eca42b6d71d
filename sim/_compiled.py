"""Which modules the install compiles, and when their plain-Python source runs instead.

The simulator's hot loop (the replica's plan -> price -> wait -> apply loop, its state, the
schedulers, KV allocators, metrics, the roofline and the cluster's arrival process) is compiled by
`setup.py` with Cython in pure-Python mode: the same `.py` source, translated to C, with Python's
semantics kept (annotations type nothing, no `cdivision`: every float operation is the same double operation,
so outputs are byte-identical; `tests/test_compiled.py` runs both and compares). A compiled
module is an extension file beside its source (`replica.cpython-311-x86_64-linux-gnu.so` next to
`replica.py`), which Python's importer prefers; where no compiler or Cython was available the
install has none and the source runs. Measured on the 100,000-request benchmark: about 40% less
CPU per request (benchmarks/simspeed.md, eighth round).

Two cases must run the source although a compiled file exists, and `install()` (called from
`sim/__init__.py`, before any of these modules is imported) puts a finder first on `sys.meta_path`
that loads them from their `.py` files:
- `INFERSIM_PURE_PYTHON=1` in the environment (the equality test; pdb, coverage and profilers that
  need Python frames);
- in a source checkout (an editable install: `setup.py` beside `sim/`), a source edited after it was
  compiled (its `.py` newer than its extension file): the compiled file would silently run the old
  code. That module alone then runs from source; reinstalling (`make test` does when a source
  changed) compiles it again. An installed wheel is not checked: its files' times are those of the
  unpacking, in no particular order, and nobody edits them.

Standard library only: `setup.py` reads `COMPILED` from this file before anything is installed.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES, SourceFileLoader
from importlib.util import spec_from_file_location
from pathlib import Path

# the compiled modules, in dependency order; `setup.py` compiles exactly these (their sources:
# `source_path`).
COMPILED: tuple[str, ...] = (
    "sim.cost.decode_runs",
    "sim.cost.llamacpp",
    "sim.cost.roofline",
    "sim.engine.kv",
    "sim.engine.metrics",
    "sim.engine.prefix_cache",
    "sim.engine.state",
    "sim.engine.schedulers",
    "sim.engine.replica",
    "sim.cluster.router",
    "sim.cluster.simulate",
)

ROOT = Path(__file__).resolve().parent.parent


def source_path(module: str, root: Path = ROOT) -> Path:
    return root.joinpath(*module.split(".")).with_suffix(".py")


def compiled_path(module: str, root: Path = ROOT) -> Path | None:
    """The extension file the importer would load for `module`, or None when there is none."""
    src = source_path(module, root)
    for suffix in EXTENSION_SUFFIXES:
        candidate = src.with_name(src.stem + suffix)
        if candidate.is_file():
            return candidate
    return None


def sources_to_run(root: Path = ROOT, pure: bool | None = None) -> list[str]:
    """The compiled modules whose source must run instead: all of them with `pure`
    (default: `INFERSIM_PURE_PYTHON=1`), else, in a source checkout, those whose `.py` is newer than
    the extension file."""
    if pure is None:
        pure = os.environ.get("INFERSIM_PURE_PYTHON") == "1"
    checkout = (root / "setup.py").is_file()
    out = []
    for module in COMPILED:
        so = compiled_path(module, root)
        if so is None:
            continue
        if pure or (checkout and source_path(module, root).stat().st_mtime > so.stat().st_mtime):
            out.append(module)
    return out


class _SourceFirst:
    """A meta-path finder that loads the listed modules from their `.py` files."""

    def __init__(self, modules: list[str], root: Path):
        self.modules = {m: source_path(m, root) for m in modules}

    def find_spec(self, fullname, path=None, target=None):
        src = self.modules.get(fullname)
        if src is None:
            return None
        return spec_from_file_location(fullname, src, loader=SourceFileLoader(fullname, str(src)))


def install() -> list[str]:
    """Put the source-first finder in place when some compiled module must not run; returns the
    modules it covers (empty: every compiled module runs compiled)."""
    if any(isinstance(f, _SourceFirst) for f in sys.meta_path):
        return []
    modules = sources_to_run()
    if modules:
        sys.meta_path.insert(0, _SourceFirst(modules, ROOT))
    return modules


def running_compiled() -> dict[str, bool]:
    """Module -> whether its compiled file runs, importing each (benchmarks/simspeed.py prints it; tests)."""
    out = {}
    for module in COMPILED:
        mod = sys.modules.get(module)
        if mod is None:
            __import__(module)
            mod = sys.modules[module]
        out[module] = not str(getattr(mod, "__file__", "")).endswith(".py")
    return out
