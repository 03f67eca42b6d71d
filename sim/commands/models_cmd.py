"""`infersim models list|show` and `infersim fit`."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from sim.models import get_model, load_catalog

app = typer.Typer(no_args_is_help=True)


@app.command("list")
def list_models() -> None:
    table = Table(title="Model catalog")
    for col in ("name", "arch", "params (B)", "active (B)", "layers", "KV heads", "KV KiB/token (fp16)", "max context"):
        table.add_column(col)
    for name, m in load_catalog().items():
        table.add_row(name, m.architecture, f"{m.n_params_total/1e9:.2f}", f"{m.n_params_active/1e9:.2f}",
                      str(m.n_layers), str(m.n_kv_heads), f"{m.kv_bytes_per_token()/1024:.0f}", str(m.max_context))
    Console().print(table)


@app.command("show")
def show(name: str) -> None:
    m = get_model(name)
    table = Table(title=m.display_name or m.name, show_header=False)
    table.add_column("field")
    table.add_column("value")
    for field, value in m.model_dump().items():
        table.add_row(field, str(value))
    table.add_row("n_params_total", f"{m.n_params_total:,}")
    table.add_row("n_params_active", f"{m.n_params_active:,}")
    table.add_row("kv_bytes_per_token (fp16)", f"{m.kv_bytes_per_token():,.0f}")
    Console().print(table)


def fit(hw: str = typer.Option(..., "--hw"), context: int = typer.Option(4096), concurrency: int = typer.Option(1)) -> None:
    raise NotImplementedError  # written by the models work
