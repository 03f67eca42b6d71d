"""The compiled hot modules (setup.py, sim/_compiled.py) give the same numbers as their sources.

Each setup runs twice in a child process, once as installed (compiled where the install built the
modules) and once with INFERSIM_PURE_PYTHON=1 (every listed module from its `.py`), and the JSON
summary, requests.csv and iterations.csv must be identical byte for byte. The setups cover the
loop's paths: paged blocks under preemption, prefix caching, contiguous reservations, slots,
static batches, several replicas, disaggregated pools, speculative decoding and TensorRT-LLM.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sim import _compiled

ROOT = Path(__file__).resolve().parent.parent
EX = ROOT / "workloads" / "examples"

SETUPS = {
    "paged-default": [EX / "chat.jsonl"],
    "prefix-preempt": [EX / "rag.jsonl", "--hw", "l40s", "--engine", "sglang", "--prefix-caching",
                       "--mem-fraction", "0.45"],
    "contiguous": [EX / "bursty.jsonl", "--kv", "contiguous", "--scheduler", "continuous", "--hw", "l40s"],
    "slots": [EX / "chat.jsonl", "--engine", "llama.cpp", "--hw", "rtx-4090"],
    "static": [EX / "coding.jsonl", "--scheduler", "static", "--max-seqs", "8"],
    "replicas": [EX / "bursty.jsonl", "--replicas", "3", "--router", "least-outstanding"],
    "disagg": [EX / "bursty.jsonl", "--disagg", "h100-sxm:1,h100-sxm:2"],
    "eagle": [EX / "chat.jsonl", "--spec-method", "eagle", "--spec-k", "4", "--spec-acceptance", "0.7",
              "--spec-draft-fraction", "0.1"],
    "trtllm": [EX / "n-users.jsonl", "--engine", "trtllm", "--hw", "h200"],
}


def _run(args, out: Path, pure: bool) -> dict[str, bytes]:
    env = {**os.environ, "INFERSIM_PURE_PYTHON": "1" if pure else "0"}
    proc = subprocess.run([sys.executable, "-m", "sim.cli", "run", *map(str, args), "--json", "--out", str(out)],
                          capture_output=True, env=env, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    files = {"stdout": proc.stdout}
    for name in ("requests.csv", "iterations.csv"):
        files[name] = (out / name).read_bytes()
    return files


def _compiled_modules_present() -> list[str]:
    return [m for m in _compiled.COMPILED if _compiled.compiled_path(m) is not None]


@pytest.mark.parametrize("name", sorted(SETUPS))
def test_compiled_and_source_give_identical_outputs(name, tmp_path):
    if not _compiled_modules_present():
        pytest.skip("this install compiled nothing (no Cython or C compiler): only the sources run")
    compiled = _run(SETUPS[name], tmp_path / "compiled", pure=False)
    source = _run(SETUPS[name], tmp_path / "source", pure=True)
    for key in compiled:
        assert compiled[key] == source[key], f"{name}: {key} differs between compiled and source runs"
    if name == "prefix-preempt":  # the setup must exercise preemption to test that path
        assert json.loads(compiled["stdout"])["kv"]["preemptions"] > 0


def _child_running(pure: bool) -> dict:
    code = "import json, sim._compiled as c; print(json.dumps(c.running_compiled()))"
    env = {**os.environ, "INFERSIM_PURE_PYTHON": "1" if pure else "0"}
    return json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, cwd=ROOT,
                                     check=True, timeout=120).stdout)


def test_pure_python_switch_runs_every_module_from_source():
    assert not any(_child_running(pure=True).values())


def test_a_built_install_runs_its_compiled_modules():
    present = _compiled_modules_present()
    if not present:
        pytest.skip("this install compiled nothing")
    running = _child_running(pure=False)
    stale = _compiled.sources_to_run(pure=False)
    assert [m for m in present if not running[m]] == stale


def _fake_tree(root: Path, compiled: dict[str, float], sources: dict[str, float]) -> None:
    """Files named like the listed modules' sources and extension files, with given mtimes."""
    from importlib.machinery import EXTENSION_SUFFIXES

    for module, mtime in sources.items():
        p = _compiled.source_path(module, root)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("")
        os.utime(p, (mtime, mtime))
    for module, mtime in compiled.items():
        src = _compiled.source_path(module, root)
        p = src.with_name(src.stem + EXTENSION_SUFFIXES[0])
        p.write_bytes(b"")
        os.utime(p, (mtime, mtime))


def test_an_edited_source_runs_instead_of_its_stale_compiled_file(tmp_path):
    now = time.time()
    a, b, c = _compiled.COMPILED[:3]
    # a: compiled after its last edit; b: edited after it was compiled; c: never compiled
    _fake_tree(tmp_path, compiled={a: now, b: now - 100}, sources={a: now - 100, b: now, c: now})
    # an installed wheel (no setup.py beside the package): unpacking order decides the times, not edits
    assert _compiled.sources_to_run(tmp_path, pure=False) == []
    (tmp_path / "setup.py").write_text("")  # a source checkout: an edit after the build is caught
    assert _compiled.sources_to_run(tmp_path, pure=False) == [b]
    assert _compiled.sources_to_run(tmp_path, pure=True) == [a, b]


def test_the_source_first_finder_loads_the_py_file(tmp_path):
    module = _compiled.COMPILED[0]
    finder = _compiled._SourceFirst([module], ROOT)
    spec = finder.find_spec(module)
    assert spec is not None and spec.origin == str(_compiled.source_path(module))
    assert finder.find_spec("sim.engine.build") is None  # not listed: the normal importers decide


def test_setup_compiles_exactly_the_listed_modules():
    """setup.py reads the list from sim/_compiled.py, and every listed module has its source."""
    text = (ROOT / "setup.py").read_text()
    assert 'run_path(str(HERE / "sim" / "_compiled.py"))["COMPILED"]' in text
    for module in _compiled.COMPILED:
        assert _compiled.source_path(module).is_file(), module
