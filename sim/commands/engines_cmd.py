"""`infersim engines`: the engine presets and the releases each one models (`--engine NAME@RELEASE`)."""

from __future__ import annotations

import typer


def list_engines(
    as_json: bool = typer.Option(False, "--json", help="print the list as JSON"),
) -> None:
    """Every shipped engine preset, its releases (the default marked *) and its scheduling policy."""
    import json

    from rich import box
    from rich.console import Console
    from rich.table import Table

    from sim.catalog.engine_config import available_engines, engine_releases, load_engine

    rows = []
    for name in available_engines():
        default, releases = engine_releases(name)
        e = load_engine(name)
        rows.append({
            "name": name, "display_name": e.display_name, "default_release": default,
            "releases": {r: load_engine(f"{name}@{r}").version for r in releases},
            "version": e.version, "scheduler": e.scheduler, "kv_allocator": e.kv_allocator,
        })
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table(title="Engine presets (--engine NAME or NAME@RELEASE)", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("name", "releases", "scheduler", "kv", "version (default release)"):
        table.add_column(col)
    for r in rows:
        rels = ", ".join(f"{k}*" if k == r["default_release"] else k for k in r["releases"]) or "-"
        table.add_row(r["name"], rels, r["scheduler"], r["kv_allocator"],
                      r["releases"].get(r["default_release"], r["version"]) if r["default_release"] else r["version"])
    Console().print(table)
