"""SGLang cookbook speed benchmarks -> serving-corpus points.

The SGLang cookbook (github.com/sgl-project/sgl-cookbook, docs/autoregressive/**.md)
prints, per model page, a "Test Environment" (hardware, model, TP, SGLang version),
the server launch command, and for each scenario the `sglang.bench_serving` command
and its full "Serving Benchmark Result" block at three concurrencies. This module
walks such a page in order and returns one point per result block, with the
environment, launch command and bench command in force where the block appears.

Used by build_corpus_b.py with a fetched snapshot of the repository (git dir given on
the command line); nothing here downloads anything.
"""
from __future__ import annotations

import re
import subprocess

from corpus_b_common import parse_bench_block


def git_show(git_dir: str, commit: str, path: str) -> str:
    return subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{path}"],
                          check=True, capture_output=True, text=True).stdout


def _flags(cmd: str) -> dict[str, str]:
    """--flag value pairs of a shell command written over several lines."""
    toks = cmd.replace("\\\n", " ").split()
    out: dict[str, str] = {}
    i = 0
    while i < len(toks):
        t = toks[i]
        if t.startswith("--"):
            if "=" in t:
                k, v = t[2:].split("=", 1)
                out[k] = v
            elif i + 1 < len(toks) and not toks[i + 1].startswith("--"):
                out[t[2:]] = toks[i + 1]
                i += 1
            else:
                out[t[2:]] = "true"
        i += 1
    return out


def parse_page(text: str) -> list[dict]:
    """One dict per result block: env, headings, launch/bench command, parsed metrics."""
    points: list[dict] = []
    env: dict[str, str] = {}
    heads = {3: "", 4: "", 5: ""}
    scenario = ""
    launch = ""
    bench = ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = re.match(r"^\s*(`{3,})", line)
        if fence:
            # A fence of N backticks closes only at a line of >= N backticks and nothing else.
            n = len(fence.group(1))
            j = i + 1
            while j < len(lines) and not re.match(r"^\s*`{%d,}\s*$" % n, lines[j]):
                j += 1
            block = "\n".join(lines[i + 1:j])
            if "Serving Benchmark Result" in block:
                points.append({"env": dict(env), "heads": dict(heads), "scenario": scenario,
                               "launch": launch, "bench": bench, "line": i + 1,
                               "metrics": parse_bench_block(block), "block": block})
            elif re.search(r"bench_serving|--dataset-name|--max-concurrency", block):
                bench = block
            elif re.search(r"launch_server|sglang serve", block):
                launch = block
            i = j + 1
            continue
        m = re.match(r"^(#{3,5})\s+(.*)", line)
        if m:
            lvl = len(m.group(1))
            heads[lvl] = m.group(2).strip()
            for k in heads:
                if k > lvl:
                    heads[k] = ""
        if "Test Environment" in line:
            env = {}
        m = re.match(r"^\s*-?\s*(Hardware|Model|Tensor Parallelism|[Ss][Gg][Ll]ang [Vv]ersion|Docker Image)\s*:\s*(.+)$", line)
        if m:
            env[m.group(1).lower()] = m.group(2).strip()
        m = re.match(r"^\s*\*\*(Scenario[^*]*)\*\*", line)
        if m:
            scenario = m.group(1).strip()
        i += 1
    return points


def bench_flags(p: dict) -> dict[str, str]:
    return _flags(p["bench"])


def launch_flags(p: dict) -> dict[str, str]:
    return _flags(p["launch"])
