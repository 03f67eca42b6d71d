"""The import structure: dependencies point one way and no module imports itself in a circle.

Layers, lowest first (a module may import its own layer and the layers below, never above):

    sim.errors, sim.files                 shared errors and file helpers
    workloads                             requests, traces, generators (imports only the above)
    sim.catalog                           hardware profiles, models, formats, engine presets
    sim.cost                              roofline, placements, speculative decoding, memory
    sim.engine                            one replica: loop, state, schedulers, KV, metrics
    sim.cluster                           simulate(): one replica or several, routers, disaggregation
    sim.api                               names -> objects -> simulate (the Python API)
    sim.bench                             benchmark clients (vllm bench serve, AIPerf, GuideLLM) replayed
    calibrate                             measuring real engines and fitting the cost model
    sim.plan                              sweeps, SLO search, reports
    sim.commands, sim.cli                 the command line

Every import counts, also those inside functions (lazy) and under `if TYPE_CHECKING:`: a
type-only circle is still a circle a reader has to untangle. The walk is plain `ast`, no
third-party import checker.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sim", "calibrate", "workloads")

LAYERS = [
    ("sim", "sim.errors", "sim.files"),
    ("workloads",),
    ("sim.catalog",),
    ("sim.cost",),
    ("sim.engine",),
    ("sim.cluster",),
    ("sim.api",),
    ("sim.bench",),
    ("calibrate",),
    ("sim.plan",),
    ("sim.commands", "sim.cli"),
]


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            parts = p.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            mods[name] = p
    return mods


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules of the three packages that `name` imports anywhere in its source."""
    out = set()
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.split(".")[0] not in PACKAGES:
                continue
            for a in node.names:
                out.add(f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] in PACKAGES}
    out.discard(name)
    return out


def _layer(module: str) -> int:
    best, rank = -1, None
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, rank = len(p), i
    assert rank is not None, f"{module} is in no layer: add it to LAYERS"
    return rank


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(m, p, set(mods)) for m, p in mods.items()}


def test_every_module_belongs_to_a_layer():
    for m in _graph():
        _layer(m)


def test_imports_point_down_the_layers():
    upward = sorted(f"{m} imports {d}" for m, deps in _graph().items() for d in deps if _layer(d) > _layer(m))
    assert not upward, "imports against the layering:\n" + "\n".join(upward)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter[0]; counter[0] += 1
        stack.append(root); on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]; counter[0] += 1
                    stack.append(w); on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop(); on_stack.discard(w); comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_no_import_circles():
    cycles = _cycles(_graph())
    assert not cycles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_checks_catch_what_they_guard_against():
    # a circle and an upward import, in a graph of our own
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    assert _layer("sim.cost.roofline") > _layer("sim.catalog.hardware")
    assert _layer("sim.commands.run") > _layer("sim.plan.sweep") > _layer("calibrate.fit")


# ---- no private member of another package -------------------------------------------------------
# A name with one leading underscore is private to the package that defines it (sim.cost, sim.engine,
# calibrate, ...: the second level under sim, the top level elsewhere). Another package may not import
# it nor read it off an object (`x._name`) unless it defines a private name of that spelling itself.

def _package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "sim" and len(parts) > 1 else parts[0]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_defs(tree: ast.AST) -> set[str]:
    """Private names a module defines: functions, classes, methods, module/class variables, and
    attributes it assigns (`self._x = ...`)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
        elif isinstance(node, ast.alias):
            out.add(node.asname or node.name.split(".")[-1])
        elif isinstance(node, ast.arg):
            out.add(node.arg)
    return {n for n in out if _private(n)}


def _private_uses(sources: dict[str, str] | None = None) -> list[str]:
    """Violations in `sources` (module -> text; default: the repository's modules)."""
    if sources is None:
        sources = {m: p.read_text() for m, p in _modules().items()}
    trees = {m: ast.parse(text, m) for m, text in sources.items()}
    defined: dict[str, set[str]] = {}
    for m, tree in trees.items():
        defined.setdefault(_package(m), set()).update(_private_defs(tree))
    out = []
    for m, tree in trees.items():
        own = defined[_package(m)]
        elsewhere = set().union(*(names for pkg, names in defined.items() if pkg != _package(m)))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES \
                    and _package(node.module) != _package(m):
                out += [f"{m}:{node.lineno} imports {node.module}.{a.name}" for a in node.names if _private(a.name)]
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and _private(node.attr) \
                    and node.attr in elsewhere and node.attr not in own:
                out.append(f"{m}:{node.lineno} reads .{node.attr}")
    return sorted(out)


def test_no_private_member_of_another_package_is_used():
    uses = _private_uses()
    assert not uses, "private members used across packages:\n" + "\n".join(uses)


def test_the_private_member_check_catches_a_reach_across():
    sources = {"sim.cost.x": "def _lines(): pass\nclass C:\n    def _fix(self): pass\n",
               "sim.engine.y": "from sim.cost.x import _lines\ndef f(c):\n    return c._fix()\n",
               "sim.engine.z": "def g(s):\n    return s._own()\ndef _own(): pass\n"}
    assert _private_uses(sources) == ["sim.engine.y:1 imports sim.cost.x._lines", "sim.engine.y:3 reads ._fix"]


def test_no_build_products_in_the_source_tree():
    """One way to run (issue 40): the packages run from their `.py` files. A compiled extension left
    beside a source (an old Cython install's `.so`, its `.c`) would be imported instead of the `.py`
    and run stale code silently: delete them (`find sim -name '*.so' -delete -o -name '*.c' -delete`)."""
    found = sorted(str(p.relative_to(ROOT)) for pkg in PACKAGES for pattern in ("*.so", "*.pyd", "*.c", "*.pyx")
                   for p in (ROOT / pkg).rglob(pattern))
    assert not found, "build products in the source tree:\n" + "\n".join(found)


MAX_MODULE_LINES = 600  # issue 40: a module that does one job fits in a screenful of screens


def test_no_module_over_600_lines():
    """Every module of the packages and of benchmarks/ (the scripts that write the committed
    reports and corpora) stays under `MAX_MODULE_LINES`: one that grows past it does several jobs
    and is split by job (as benchmarks/fidelity.py and its report, or the InferenceX importer and
    its per-source modules)."""
    over = sorted(f"{p.relative_to(ROOT)}: {n} lines" for top in (*PACKAGES, "benchmarks")
                  for p in (ROOT / top).rglob("*.py")
                  if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES)
    assert not over, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(over)
