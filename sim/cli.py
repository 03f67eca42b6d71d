"""The `infersim` command line.

Each command group lives with the code it drives; this module only assembles them. A `ConfigError`
(a click exception) prints one line on stderr and exits with status 2.

`main` registers only the area that owns the command it was asked for (`infersim run ...` does not
import the calibration, plan or validation commands and their libraries: ~45 ms of start-up, issue
17); `infersim --help`, no argument or an unknown command get the whole tree. `app` (what the tests
drive) is the whole tree, built on first use.

The simulator's commands (`run`, `sweep`, `plan`) call no BLAS routine, so `main` keeps numpy's
OpenBLAS to one thread for them unless `OPENBLAS_NUM_THREADS` is set: OpenBLAS otherwise starts a
thread per core when numpy is imported (~40 ms of a 1-request run on 2 cores, more on big machines;
issue 17). Results do not depend on it.
"""

from __future__ import annotations

import os
import sys

import typer

_HELP = "Simulate LLM inference on hardware you have or might buy, and plan capacity."
# "\b" keeps click from re-wrapping the lines of the paragraph that follows it
_EPILOG = ("\b\nExit status (docs/invariants.md):\n"
           "  0    success\n"
           "  1    partial failure: some requests rejected, some sweep points or plan candidates failed,\n"
           "       some replayed requests failed or the engine stopped answering\n"
           "  2    usage or input error (one line: file, line, field); nothing ran\n"
           "  3    total failure: every request rejected, every sweep point or plan candidate failed\n"
           "  130  interrupted (Ctrl-C, SIGTERM): finished work is written, the message says how to resume")

# first argument -> the area that registers it (`_register`); tests check it against the whole tree
AREA_OF_COMMAND = {
    "hw": "hw", "engines": "hw", "models": "models", "fit": "models", "recommend": "models", "run": "run", "trace": "workloads", "calibrate": "calibrate",
    "sweep": "plan", "plan": "plan", "replay": "validate", "validate": "validate", "bench": "bench",
}
_AREAS = ("hw", "models", "run", "workloads", "calibrate", "plan", "validate", "bench")  # registration order
_NO_BLAS = ("run", "sweep", "plan")  # commands whose work calls no BLAS routine (one OpenBLAS thread)


def _new_app() -> typer.Typer:
    return typer.Typer(
        name="infersim",
        help=_HELP,
        epilog=_EPILOG,
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=False,
        # Plain click error output: a usage or config error is one line, not a rich panel.
        rich_markup_mode=None,
    )


def _register(app: typer.Typer, areas: tuple[str, ...] = _AREAS) -> typer.Typer:
    """Attach the command groups of `areas`; each area owns its commands and exposes `register(app)`."""
    import importlib

    for area in areas:
        if area == "hw":
            from sim.commands import hw

            app.add_typer(hw.app, name="hw", help="List and show hardware profiles.")
            from sim.commands import engines_cmd

            app.command("engines", help="List the engine presets and their releases.")(engines_cmd.list_engines)
        elif area == "models":
            from sim.commands import models_cmd

            app.add_typer(models_cmd.app, name="models", help="List and show the model catalog.")
            app.command("fit", help="What fits in memory on a machine: models x quantizations.")(models_cmd.fit)
            from sim.commands import recommend

            app.command("recommend", help="What to run on this machine for a stated need, with the commands.")(
                recommend.recommend)
        else:
            module = {"run": "sim.commands.run", "workloads": "workloads.cli", "calibrate": "calibrate.cli",
                      "plan": "sim.commands.plan", "validate": "sim.commands.validate",
                      "bench": "sim.commands.bench"}[area]
            importlib.import_module(module).register(app)
    return app


def _only(area: str) -> typer.Typer:
    """An app with one area's commands, still a command group (typer runs a lone command without
    its name unless the app has a callback)."""
    app = _new_app()
    app.callback()(_group)
    return _register(app, (area,))


def _group() -> None:
    """Simulate LLM inference on hardware you have or might buy, and plan capacity."""


_app: typer.Typer | None = None


def __getattr__(name: str):
    if name == "app":
        global _app
        if _app is None:
            _app = _register(_new_app())
        return _app
    raise AttributeError(name)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    area = AREA_OF_COMMAND.get(args[0]) if args else None
    if args and args[0] in _NO_BLAS and "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    app = _only(area) if area is not None else __getattr__("app")
    app(args=argv)


def console_main() -> None:
    """The `infersim` command (pyproject `[project.scripts]`): `main`, then an exit that skips the
    interpreter's teardown. Finalization frees every module's objects one by one (numpy, pydantic,
    the run's arrays and logs): measured 40-60 ms of a command whose 10k-request simulation takes
    ~0.3 s, with no effect outside the process. Exit handlers still run (`atexit`: ray's shutdown,
    logging, temporary directories) and the standard streams are flushed before `os._exit`; with a
    thread still alive the normal exit runs instead, to join it. Tests and the Python API call
    `main`, which keeps the normal exit."""
    import atexit
    import threading

    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code
    if threading.active_count() > 1:
        sys.exit(code)
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"): printed, status 1, as Python does
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a reader that went away (`| head`): Python's own exit gives 120
        code = code or 120
    os._exit(code)


if __name__ == "__main__":
    console_main()
