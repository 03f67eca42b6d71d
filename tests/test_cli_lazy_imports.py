"""`infersim` starts fast because it imports only what the command it runs uses (issue 17).

Typer builds the whole command tree when `sim.cli` is imported, so every command module is
imported then: their heavy dependencies must load inside the commands. These tests import the CLI
in a fresh interpreter and look at `sys.modules` — a regression fails here, not in a timing test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("plotly", "pandas", "scipy", "llama_cpp", "httpx", "ray")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"],
                         cwd=ROOT, check=True, capture_output=True, text=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_importing_the_cli_loads_no_heavy_library():
    loaded = _modules_after("import sim.cli")
    assert not [m for m in HEAVY if m in loaded]


def test_importing_the_cli_loads_neither_numpy_nor_the_pydantic_models():
    # `infersim --help` and a typo'd command need no model, profile or preset.
    loaded = _modules_after("import sim.cli")
    assert not [m for m in ("numpy", "pydantic", "yaml", "simpy", "sim.api", "sim.catalog.hardware", "sim.catalog.models",
                            "sim.catalog.engine_config", "workloads.trace") if m in loaded]


def test_help_runs_without_heavy_libraries():
    loaded = _modules_after("import sim.cli\ntry:\n    sim.cli.main(['--help'])\nexcept SystemExit:\n    pass")
    assert not [m for m in HEAVY if m in loaded]


def test_run_json_simulates_without_pandas_or_plotly(tmp_path):
    # A summary-only run builds no table: pandas (a third of a second) stays unloaded.
    trace = ROOT / "workloads" / "examples" / "chat.jsonl"
    code = (f"import sim.cli\ntry:\n    sim.cli.main(['run', {str(trace)!r}, '--json'])\nexcept SystemExit as e:\n"
            "    assert not e.code, e.code")
    loaded = _modules_after(code)
    assert "sim.cluster.simulate" in loaded
    assert not [m for m in HEAVY if m in loaded]


@pytest.mark.parametrize("argv", [["run", "--help"], ["sweep", "--help"], ["plan", "--help"], ["trace", "--help"],
                                  ["calibrate", "--help"], ["hw", "--help"], ["models", "--help"]])
def test_command_help_loads_no_heavy_library(argv):
    loaded = _modules_after(f"import sim.cli\ntry:\n    sim.cli.main({argv!r})\nexcept SystemExit:\n    pass")
    assert not [m for m in HEAVY if m in loaded]


def test_every_command_maps_to_the_area_that_registers_it():
    # `main` registers only the area owning argv[0]: the map must name every top-level command.
    import sim.cli

    full = sim.cli.app
    names = {g.name for g in full.registered_groups} | {c.name for c in full.registered_commands}
    assert names == set(sim.cli.AREA_OF_COMMAND)
    for name, area in sim.cli.AREA_OF_COMMAND.items():
        one = sim.cli._register(sim.cli._new_app(), (area,))
        assert name in {g.name for g in one.registered_groups} | {c.name for c in one.registered_commands}


def test_run_does_not_import_the_other_commands(tmp_path):
    trace = ROOT / "workloads" / "examples" / "chat.jsonl"
    loaded = _modules_after(f"import sim.cli\ntry:\n    sim.cli.main(['run', {str(trace)!r}, '--json'])\n"
                            "except SystemExit as e:\n    assert not e.code, e.code")
    assert not [m for m in ("calibrate.cli", "sim.commands.plan", "sim.commands.validate") if m in loaded]


def test_run_json_loads_no_rich_and_one_openblas_thread():
    # Under --json the config line is plain text on stderr (rich only for lines it would change),
    # and OpenBLAS starts one thread: the simulator calls no BLAS routine.
    trace = ROOT / "workloads" / "examples" / "chat.jsonl"
    code = (f"import os\nos.environ.pop('OPENBLAS_NUM_THREADS', None)\nimport sim.cli\ntry:\n"
            f"    sim.cli.main(['run', {str(trace)!r}, '--json'])\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "assert os.environ['OPENBLAS_NUM_THREADS'] == '1'")
    loaded = _modules_after(code)
    assert "sim.cluster.simulate" in loaded
    assert not [m for m in loaded if m == "rich" or m.startswith("rich.")]


def test_a_users_openblas_setting_is_kept():
    code = ("import os\nos.environ['OPENBLAS_NUM_THREADS'] = '3'\nimport sim.cli\ntry:\n"
            "    sim.cli.main(['run', 'no-such-trace.jsonl', '--json'])\nexcept SystemExit:\n    pass\n"
            "assert os.environ['OPENBLAS_NUM_THREADS'] == '3'")
    _modules_after(code)


@pytest.mark.parametrize("line", [
    "config: hw=a100-80g model=llama-2-7b quant=bf16 | open loop (trace arrival times) | trace=chat.jsonl",
    "x | disaggregated prefill,decode = h100-sxm:1,h100-sxm:2 | trace=/tmp/a b/é 漢字.jsonl",
    "a: b: c", "trailing  ", " leading", "100% \\ back\\slash", "emoji :smile: here", "markup [bold]x[/bold]",
    "tab\there", "a:-emoji:", "",
])
def test_config_line_prints_as_rich_prints_it(line, capsys):
    from rich.console import Console

    from sim.commands import run

    Console(stderr=True).print(line, highlight=False, soft_wrap=True)
    want = capsys.readouterr().err
    run._print_config(line, err=True)
    assert capsys.readouterr().err == want
    if run._plain(line):  # written directly: exactly what rich writes
        assert want == line + "\n"
    assert not run._plain(line) or not any(c in line for c in "[\t") and ":smile:" not in line
