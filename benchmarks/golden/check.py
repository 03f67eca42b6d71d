"""Byte-identical outputs of a fixed set of `infersim` command lines (issue #40's refactoring check).

    python benchmarks/golden/check.py            # run every line, compare with out/NN.txt, diff on mismatch
    python benchmarks/golden/check.py --record   # write out/NN.txt from this tree
    python benchmarks/golden/check.py 3 17       # only lines 3 and 17

Each non-comment line of commands.txt is `infersim ARGS` (or `cd DIR && infersim ARGS`); it runs as `python -m sim.cli ARGS` from
the repository root (this interpreter, PYTHONPATH = the root, COLUMNS=200 so tables have one width),
`{OUT}` replaced by an empty scratch folder (and the folder's path written back as `{OUT}` in its
output). Its stdout then stderr are compared, minus the lines
that carry wall-clock time ("simulated N requests in X s wall (...)", a plan's "... s wall"), which
are the only output that differs between two runs of the same tree. Exit 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
# wall-clock figures: the run/sweep/plan progress lines that time the simulation itself
# and progress bars (their elapsed and remaining h:mm:ss)
WALL = re.compile(r"\bwall\b|\bs elapsed\b|requests/s\)|\b\d+:\d\d:\d\d\b")


def commands() -> list[str]:
    out = []
    for line in (HERE / "commands.txt").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            if not line.split(" && ")[-1].startswith("infersim "):
                raise SystemExit(f"commands.txt: not an infersim command: {line}")
            out.append(line)
    return out


def run(i: int, line: str) -> str:
    cwd = ROOT
    if line.startswith("cd "):  # `cd DIR && infersim ...`: run from DIR (relative to the root)
        where, line_ = line[3:].split(" && ", 1)
        cwd = ROOT / where
    else:
        line_ = line
    args = shlex.split(line_)[1:]
    # a fresh folder of its own (a fixed-length random name: two checks running at once, e.g. in two
    # worktrees, must not resume each other's sweeps)
    scratch = Path(tempfile.mkdtemp(prefix=f"infersim-golden-{i:02d}-"))
    args = [a.replace("{OUT}", str(scratch)) for a in args]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    proc = subprocess.run([sys.executable, "-m", "sim.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    text = f"$ {line}\n[exit {proc.returncode}]\n{proc.stdout}\n[stderr]\n{proc.stderr}"
    text = text.replace(str(scratch), "{OUT}")  # the same text whatever the temporary folder is
    shutil.rmtree(scratch, ignore_errors=True)
    return "".join(l for l in text.splitlines(keepends=True) if not WALL.search(l))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--record", action="store_true", help="write out/NN.txt instead of comparing")
    ap.add_argument("only", nargs="*", type=int, help="line numbers (1-based) to run; default all")
    a = ap.parse_args()
    lines = commands()
    out_dir = HERE / "out"
    out_dir.mkdir(exist_ok=True)
    bad = 0
    for i, line in enumerate(lines, 1):
        if a.only and i not in a.only:
            continue
        got = run(i, line)
        path = out_dir / f"{i:02d}.txt"
        if a.record:
            path.write_text(got)
            print(f"{i:02d} recorded", flush=True)
            continue
        want = path.read_text() if path.is_file() else ""
        if got == want:
            print(f"{i:02d} ok", flush=True)
        else:
            bad += 1
            print(f"{i:02d} MISMATCH: {line}", flush=True)
            sys.stdout.writelines(difflib.unified_diff(want.splitlines(keepends=True), got.splitlines(keepends=True),
                                                       f"out/{i:02d}.txt", "this tree", n=1))
    if not a.record:
        print(f"{len(a.only) if a.only else len(lines)} lines, {bad} mismatched")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
