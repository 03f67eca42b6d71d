"""Build hook: compile the simulator's hot modules with Cython (everything else is in pyproject.toml).

The modules listed in `sim/_compiled.py` are translated from their unchanged `.py` sources in
Cython's pure-Python mode and built as optional extensions: where Cython or a C compiler is missing
or fails, the install still succeeds and those modules run as plain Python (same results, slower).
`INFERSIM_PURE_PYTHON=1` at install time skips the compilation. Why Cython: ~40% less CPU per
simulated request with the source kept as the one definition (benchmarks/simspeed.md, eighth round);
it is a build-time dependency only (pyproject.toml [build-system]), nothing imports it at run time.
"""

import os
import runpy
import sys
from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).resolve().parent


def extensions() -> list:
    if os.environ.get("INFERSIM_PURE_PYTHON") == "1":
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("infersim: Cython not available, the simulator runs as plain Python", file=sys.stderr)
        return []
    modules = runpy.run_path(str(HERE / "sim" / "_compiled.py"))["COMPILED"]
    exts = [Extension(m, [m.replace(".", "/") + ".py"], optional=True) for m in modules]
    try:
        # Python's semantics throughout: language_level 3; annotation_typing off, so annotations type
        # nothing (with it on, `x: float` becomes a C double and `n: int` rejects a numpy integer,
        # which plain Python accepts); every other directive at its default (no cdivision, `binding`
        # on). Typing the hot loop would gain little: measured equal on the 100k benchmark.
        return cythonize(exts, compiler_directives={"language_level": "3", "annotation_typing": False},
                         quiet=True)
    except Exception as e:  # noqa: BLE001 - a Cython that cannot translate a module: run the source
        print(f"infersim: Cython failed ({e}); the simulator runs as plain Python", file=sys.stderr)
        return []


setup(ext_modules=extensions())
