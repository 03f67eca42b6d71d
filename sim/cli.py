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
    """Attach every command group. Imports are local so one broken area names itself clearly."""
    from sim.commands import hw, models_cmd

    app.add_typer(hw.app, name="hw", help="List and show hardware profiles.")
    app.add_typer(models_cmd.app, name="models", help="List and show the model catalog.")
    app.command("fit", help="What fits in memory on a machine: models x quantizations.")(models_cmd.fit)
    for optional in ("sim.commands.run", "workloads.cli", "calibrate.cli", "sim.commands.plan", "sim.commands.validate"):
        try:
            mod = __import__(optional, fromlist=["register"])
        except ModuleNotFoundError as e:
            if e.name and optional.startswith(e.name):
                continue
            raise
        mod.register(app)


_register()


def main(argv: list[str] | None = None) -> None:
    app(args=argv)


if __name__ == "__main__":
    main()
