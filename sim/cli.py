"""The `infersim` command line.

Each command group lives with the code it drives; this module only assembles them. A `ConfigError`
(a click exception) prints one line on stderr and exits with status 2.
"""

from __future__ import annotations

import typer

app = typer.Typer(
    name="infersim",
    help="Simulate LLM inference on hardware you have or might buy, and plan capacity.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    # Plain click error output: a usage or config error is one line, not a rich panel.
    rich_markup_mode=None,
)


def _register() -> None:
    """Attach every command group; each area owns its commands and exposes `register(app)`."""
    from calibrate import cli as calibrate_cli
    from sim.commands import hw, models_cmd, plan, run, validate
    from workloads import cli as workloads_cli

    app.add_typer(hw.app, name="hw", help="List and show hardware profiles.")
    app.add_typer(models_cmd.app, name="models", help="List and show the model catalog.")
    app.command("fit", help="What fits in memory on a machine: models x quantizations.")(models_cmd.fit)
    for area in (run, workloads_cli, calibrate_cli, plan, validate):
        area.register(app)


_register()


def main(argv: list[str] | None = None) -> None:
    app(args=argv)


if __name__ == "__main__":
    main()
