"""One error type for everything the user can get wrong.

A `ConfigError` carries the place (file, line, field) and a one-line problem; the CLI prints
`str(err)` on one line and exits with status 2 — never a traceback.
"""

from __future__ import annotations

from pathlib import Path

try:  # typer >= 0.2x vendors click as typer._click; older typer depends on click itself
    from typer._click.exceptions import ClickException
    from typer._click.utils import echo
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import ClickException, echo


class ConfigError(ClickException):
    """Bad user input: a file, a line in it, a field, and what is wrong with it.

    A click `ClickException`, so any command that raises it (also under `CliRunner`) prints one
    line, `error: FILE:LINE: field: problem`, on stderr and exits with status 2.
    """

    exit_code = 2

    def __init__(
        self,
        problem: str,
        *,
        file: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.problem = problem
        self.file = str(file) if file is not None else None
        self.line = line
        self.field = field
        super().__init__(self.format())

    def show(self, file=None) -> None:  # noqa: D102 - click's hook, one line on stderr
        echo(f"error: {self.format()}", err=True, file=file)

    def format(self) -> str:
        where = ""
        if self.file:
            where = self.file
            if self.line is not None:
                where += f":{self.line}"
            where += ": "
        field = f"{self.field}: " if self.field else ""
        return f"{where}{field}{self.problem}"


def pydantic_error_to_config_error(
    exc: Exception, *, file: str | Path | None = None, line: int | None = None, prefix: str = ""
) -> ConfigError:
    """Turn the first error of a pydantic ValidationError into a ConfigError naming the field."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        errs = errors()
        if errs:
            first = errs[0]
            loc = ".".join(str(p) for p in first.get("loc", ()))
            msg = first.get("msg", "invalid value")
            if first.get("type") == "extra_forbidden":
                msg = "unknown field"
            more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
            return ConfigError(msg + more, file=file, line=line, field=(prefix + loc) or None)
    return ConfigError(str(exc), file=file, line=line)


class Interrupted(ClickException):
    """SIGINT (Ctrl-C) or SIGTERM stopped a command: one line on stderr saying what was kept and how
    to go on, exit status 130 (128 + SIGINT, what a shell reports for a Ctrl-C'd program)."""

    exit_code = 130

    def __init__(self, what: str = "nothing was written") -> None:
        self.what = what
        super().__init__(what)

    def show(self, file=None) -> None:  # noqa: D102 - click's hook
        echo(f"interrupted: {self.what}", err=True, file=file)


def sigterm_as_interrupt() -> None:
    """Make SIGTERM raise KeyboardInterrupt like SIGINT, so `kill PID` stops a long command the same
    way Ctrl-C does (what is finished is written, the rest is cleaned up). Main thread only."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.default_int_handler)


# Exit statuses of every command (documented in docs/invariants.md and `infersim --help`), after
# pytest's: 0 all went well; 1 some of the work failed (requests rejected, sweep points or plan
# candidates failed, a replay's requests failed or its engine stopped answering), what succeeded is
# reported; 2 usage or input error (nothing ran); 3 all of the work failed (every request rejected,
# every combination or candidate failed); 130 interrupted (SIGINT / SIGTERM), what finished is kept.
EXIT_OK = 0
EXIT_PARTIAL = 1
EXIT_USAGE = 2
EXIT_ALL_FAILED = 3
EXIT_INTERRUPTED = 130


def interruptible(what: str):
    """Decorate a command: SIGTERM acts as SIGINT, and either ends it with `Interrupted(what)`
    (exit 130, one line) instead of click's "Aborted!" (exit 1). For commands that keep nothing
    partial; those that do catch KeyboardInterrupt themselves and say where it is."""
    import functools

    def wrap(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            sigterm_as_interrupt()
            try:
                return fn(*args, **kwargs)
            except (KeyboardInterrupt, Interrupted):  # Interrupted: a replay inside it stopped
                raise Interrupted(what) from None
        return run
    return wrap
