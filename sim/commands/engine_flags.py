"""The engine options (`sim.catalog.engine_options.ENGINE_OPTIONS`) as typer options and argparse arguments.

`infersim run` declares none of them itself: `@with_engine_options(after=...)` puts them into its
signature (typer reads options from the signature), and the command receives their values as one
`engine_options` dict for `overrides_from`. `infersim bench serve`, an argparse parser shaped like
vLLM's, adds the same options with `add_engine_arguments`.
"""

from __future__ import annotations

import argparse
import functools
import inspect
from typing import Any, Callable, Optional

import typer

from sim.catalog.engine_options import ENGINE_OPTIONS


def _typer_parameter(o) -> inspect.Parameter:
    return inspect.Parameter(o.param, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Optional[o.type],
                             default=typer.Option(None, o.flags, help=o.help))


def with_engine_options(after: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A typer command with every engine option, listed after its parameter `after`; the command
    takes `engine_options: dict` (parameter name -> value, None when not given) instead of them."""

    def wrap(command: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(command, eval_str=True)
        params = [p for p in sig.parameters.values() if p.name != "engine_options"]
        at = [p.name for p in params].index(after) + 1
        params[at:at] = [_typer_parameter(o) for o in ENGINE_OPTIONS]

        @functools.wraps(command)
        def with_options(*args: Any, **kwargs: Any) -> Any:
            values = {o.param: kwargs.pop(o.param, None) for o in ENGINE_OPTIONS}
            return command(*args, **kwargs, engine_options=values)

        with_options.__signature__ = sig.replace(parameters=params)  # what typer reads
        with_options.__annotations__ = {p.name: p.annotation for p in params}
        return with_options

    return wrap


def add_engine_arguments(parser: argparse.ArgumentParser, title: str) -> None:
    """The engine options as an argparse group (`dest` = parameter name, default None)."""
    group = parser.add_argument_group(title)
    for o in ENGINE_OPTIONS:
        if o.switch:  # --x/--no-x
            group.add_argument(o.flags.split("/")[0], dest=o.param, action=argparse.BooleanOptionalAction,
                               default=None, help=o.help)
        else:
            group.add_argument(o.flags, dest=o.param, type=o.type, default=None, help=o.help)
