"""The one failure a replay cannot measure around: the engine is not there."""

from __future__ import annotations

try:  # same click import dance as sim.errors
    from typer._click.exceptions import ClickException
    from typer._click.utils import echo
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import ClickException, echo

from sim.errors import Interrupted


class EngineUnreachable(ClickException):
    """The engine could not be reached or stopped answering; the CLI prints one line and exits 1.

    `partial` carries whatever was measured before the failure (a `ReplayResult` or None), so a
    command can still write it.
    """

    exit_code = 1

    def __init__(self, reason: str, *, partial=None) -> None:
        self.reason = reason
        self.partial = partial
        super().__init__(reason)

    def show(self, file=None) -> None:  # noqa: D102 - click's hook
        echo(f"error: engine unreachable: {self.reason}", err=True, file=file)


class ReplayInterrupted(Interrupted):
    """SIGINT or SIGTERM stopped a replay; `partial` carries what was measured (or None)."""

    def __init__(self, what: str = "nothing was measured", *, partial=None) -> None:
        self.partial = partial
        super().__init__(what)
