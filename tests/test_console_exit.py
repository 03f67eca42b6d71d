"""The `infersim` command's fast exit (sim.cli.console_main): exit status, output and exit handlers
are those of a normal exit; only the interpreter's teardown is skipped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.paths import INFERSIM

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "workloads" / "examples" / "chat.jsonl"


def _console(argv: list[str], prelude: str = "") -> subprocess.CompletedProcess:
    code = f"import sys\n{prelude}\nsys.argv = ['infersim', *{argv!r}]\nfrom sim.cli import console_main\nconsole_main()"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_the_installed_command_is_the_fast_exit():
    text = Path(INFERSIM).read_text()
    assert "console_main" in text


def test_output_is_complete_and_the_status_zero():
    out = _console(["run", str(TRACE), "--json"])
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["requests"]["completed"] == 200  # the whole JSON arrived, flushed


def test_a_bad_option_keeps_status_2_and_its_one_line_error():
    out = _console(["run", str(TRACE), "--hw", "no-such-gpu"])
    assert out.returncode == 2
    assert "error:" in out.stderr and "Traceback" not in out.stderr


def test_exit_handlers_still_run():
    out = _console(["--help"], prelude="import atexit\natexit.register(lambda: print('handler ran', flush=True))")
    assert out.returncode == 0
    assert out.stdout.rstrip().endswith("handler ran")


def test_a_live_thread_gets_the_normal_exit_which_joins_it():
    prelude = ("import threading, time\n"
               "threading.Thread(target=lambda: (time.sleep(0.3), print('thread done', flush=True))).start()")
    out = _console(["--help"], prelude=prelude)
    assert out.returncode == 0
    assert "thread done" in out.stdout
