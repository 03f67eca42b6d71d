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
