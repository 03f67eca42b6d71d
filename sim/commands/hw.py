"""`infersim hw list|show`."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from sim.hardware import available_profiles, load_profile, load_profile_file

app = typer.Typer(no_args_is_help=True)


@app.command("list")
def list_profiles() -> None:
    """Every profile found (user folder first, then the shipped ones)."""
    table = Table(title="Hardware profiles")
    for col in ("name", "kind", "memory GB", "bandwidth GB/s", "bf16 TFLOP/s", "fp8 TFLOP/s", "fp4 TFLOP/s", "$/hour", "price $"):
        table.add_column(col, justify="left" if col in ("name", "kind") else "right")
    for name, path in available_profiles().items():
        p = load_profile_file(path)
        tf = p.peak_tflops

        def fmt(x):
            return "-" if x is None else f"{x:,.0f}" if x >= 10 else f"{x:,.2f}"

        table.add_row(
            name, p.kind, fmt(p.memory_capacity_gb), fmt(p.memory_bandwidth_gb_per_s),
            fmt(tf.get("bf16", tf.get("fp16"))), fmt(tf.get("fp8")), fmt(tf.get("fp4")),
            fmt(p.price.rental_usd_per_hour), fmt(p.price.purchase_usd),
        )
    Console().print(table)


@app.command("show")
def show(name: str = typer.Argument(..., help="profile name or path to a YAML file")) -> None:
    """Every field of one profile, with its sources."""
    p = load_profile(name)
    table = Table(title=p.display_name or p.name, show_header=False)
    table.add_column("field")
    table.add_column("value")
    for field, value in p.model_dump().items():
        if field == "sources":
            value = "\n".join(f"{s['url']}  {s['what']}".strip() for s in value)
        table.add_row(field, str(value))
    Console().print(table)
