"""`infersim hw list|show`: the hardware profiles, as tables that stay readable at 80 columns."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer
from rich import box
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:  # the profile models load when a command runs, not when `infersim` starts
    from sim.catalog.hardware import HardwareProfile

app = typer.Typer(no_args_is_help=True)


def _num(x: float | None) -> str:
    """Compact number: thousands separators from 10 up, two decimals below, '-' when missing."""
    if x is None:
        return "-"
    if x >= 10:
        return f"{x:,.0f}"
    return f"{x:.2f}".rstrip("0").rstrip(".") if x else "0"


def _memory(p: HardwareProfile) -> str:
    """Memory as the vendor states it: GiB when the profile gives GiB, else decimal GB."""
    if p.memory_capacity_gib is not None:
        return f"{_num(p.memory_capacity_gib)} GiB"
    return f"{_num(p.memory_capacity_gb)} GB"


def _usd(x: float | None) -> str:
    return "-" if x is None else f"{x:,.2f}"


def _tf(p: HardwareProfile, fmt: str) -> str:
    """Dense peak for a format the chip has natively; '-' when it would only be a fallback."""
    return _num(p.peak_tflops.get(fmt))


def _bf16(p: HardwareProfile) -> str:
    """bf16 peak, or the fp16/fp32 rate it falls back to (chips without bf16 units, e.g. Apple GPUs)."""
    return _num(p.peak_flops("bf16") / 1e12)


@app.command("list")
def list_profiles(
    wide: bool = typer.Option(False, "--wide", "-w", help="more columns: fp4, int8, power, purchase, link"),
) -> None:
    """Every profile found: user folder ($INFERSIM_HOME/profiles) first, then the shipped ones."""
    from sim.catalog.hardware import available_profiles, load_profile_file

    table = Table(title="Hardware profiles (dense peaks)", box=box.SIMPLE_HEAD, pad_edge=False)
    cols = [("name", "left"), ("kind", "left"), ("memory", "right"), ("GB/s", "right"),
            ("bf16 TF", "right"), ("fp8 TF", "right"), ("$/h", "right")]
    if wide:
        cols += [("fp4 TF", "right"), ("int8 TOPS", "right"), ("W", "right"), ("buy $", "right"),
                 ("link GB/s", "right")]
    for header, justify in cols:
        table.add_column(header, justify=justify, no_wrap=True)
    for name, path in available_profiles().items():
        p = load_profile_file(path)
        row = [name, p.kind, _memory(p), _num(p.memory_bandwidth_gb_per_s), _bf16(p), _tf(p, "fp8"),
               _usd(p.price.rental_usd_per_hour)]
        if wide:
            row += [_tf(p, "fp4"), _tf(p, "int8"), _num(p.power_w), _num(p.price.purchase_usd),
                    _num(p.interconnect_bandwidth_gb_per_s)]
        table.add_row(*row)
    console = Console()
    if wide:  # the wide table needs ~125 columns; print it whole rather than truncate cells
        console = Console(width=max(console.width, 200))
    console.print(table)
    console.print("GB/s: peak memory bandwidth; TF: dense TFLOP/s; sources: infersim hw show NAME")


@app.command("show")
def show(name: str = typer.Argument(..., help="profile name or path to a YAML file")) -> None:
    """Every field of one profile, with where each figure comes from."""
    from sim.catalog.hardware import load_profile

    p = load_profile(name)
    console = Console()

    spec = Table(title=f"{p.display_name or p.name} ({p.name})", show_header=False, box=box.SIMPLE)
    spec.add_column("field", style="bold", no_wrap=True)
    spec.add_column("value")
    usable_gb = p.usable_memory_bytes / 1e9
    spec.add_row("kind / vendor", f"{p.kind} / {p.vendor or '-'}")
    spec.add_row("compute capability", p.compute_capability or "-")
    spec.add_row("memory", f"{_memory(p)} = {p.memory_capacity_gb:,.1f} GB; usable "
                           f"{p.usable_memory_fraction:g} -> {usable_gb:,.1f} GB")
    spec.add_row("bandwidth", f"{p.memory_bandwidth_gb_per_s:,g} GB/s")
    spec.add_row("interconnect", "-" if p.interconnect_bandwidth_gb_per_s is None else
                 f"{p.interconnect_bandwidth_gb_per_s:,g} GB/s per direction, {p.interconnect_latency_us:g} us"
                 + ("" if p.allreduce_bus_bandwidth_gb_per_s is None else
                    f"; all-reduce bus bandwidth {p.allreduce_bus_bandwidth_gb_per_s:,g} GB/s"))
    spec.add_row("host link", "-" if p.host_bandwidth_gb_per_s is None else
                 f"{p.host_bandwidth_gb_per_s:,g} GB/s per direction")
    spec.add_row("overheads", f"{p.iteration_overhead_ms:g} ms / iteration, "
                              f"{p.per_sequence_overhead_ms:g} ms / sequence")
    spec.add_row("power", "-" if p.power_w is None else f"{p.power_w:g} W")
    price = [f"${p.price.rental_usd_per_hour:.2f}/h" if p.price.rental_usd_per_hour is not None else "",
             f"${p.price.purchase_usd:,.0f} to buy" if p.price.purchase_usd is not None else ""]
    spec.add_row("price", ", ".join(x for x in price if x) or "-")
    if p.calibration:
        spec.add_row("calibration", ", ".join(f"{k}={v}" for k, v in p.calibration.items()))
    console.print(spec)

    peaks = Table(title="Dense peaks", box=box.SIMPLE_HEAD)
    peaks.add_column("format")
    peaks.add_column("TFLOP/s (TOPS)", justify="right")
    for fmt, tf in sorted(p.peak_tflops.items(), key=lambda kv: -kv[1]):
        peaks.add_row(fmt, f"{tf:,g}")
    console.print(peaks)

    eff = Table(title="Efficiency (achieved / peak)", box=box.SIMPLE_HEAD)
    for col in ("engine", "compute", "bandwidth", "attention"):
        eff.add_column(col, justify="left" if col == "engine" else "right")
    plain = [(k, e) for k, e in [("default", p.efficiency), *p.engine_efficiency.items()] if not e.compute_by_class]
    for engine, e in plain:
        eff.add_row(engine, f"{e.compute:g}", f"{e.bandwidth:g}", f"{e.attention:g}")
    console.print(eff)
    fitted = [(k, e) for k, e in p.engine_efficiency.items() if e.compute_by_class]
    if fitted:
        # efficiencies fitted to public measurements per kernel family (calibrate/public_fit.py)
        fit = Table(title="Fitted to public measurements, per kernel family (infersim calibrate --public)",
                    box=box.SIMPLE_HEAD)
        for col in ("family", "bandwidth", "compute", "attn/peak", "floor ms", "rows", "expected error (p80)"):
            fit.add_column(col, justify="left" if col in ("family", "bandwidth", "compute", "expected error (p80)")
                           else "right", overflow="fold")
        for fam, e in fitted:
            bands = ", ".join(f"{k} ±{b.pct:.0f}%" for k, b in e.error.items()) or "-"
            rows = (f"{len(e.corpus_rows)}" if not e.transferred_from
                    else f"0 (from {', '.join(e.transferred_from)})")
            fit.add_row(fam, " ".join(f"{c} {v:.2f}" for c, v in e.bandwidth_by_class.items()),
                        " ".join(f"{c} {v:.3f}" for c, v in e.compute_by_class.items()),
                        "-" if e.attention_of_peak is None else f"{e.attention_of_peak:.3f}",
                        "-" if e.floor_ms is None else f"{e.floor_ms:.2f}", rows, bands)
        console.print(fit)

    why = Table(title="Where the figures come from", show_header=False, box=box.SIMPLE)
    why.add_column("what", style="bold", max_width=24, overflow="fold")
    why.add_column("source")
    if p.efficiency.source:
        why.add_row("efficiency", p.efficiency.source)
    for engine, e in p.engine_efficiency.items():
        if e.source:
            why.add_row(f"efficiency[{engine}]", e.source)
    if p.price.source:
        why.add_row("price", p.price.source)
    for field, text in p.provenance.items():
        why.add_row(field, text)
    for i, s in enumerate(p.sources, 1):
        why.add_row(f"[{i}]", f"{s.url}\n{s.what}" if s.what else s.url)
    if p.notes:
        why.add_row("notes", p.notes)
    console.print(why)


def register(root: typer.Typer) -> None:
    """Attach `hw list|show` to the root app (sim.cli already does this for the hw group)."""
    root.add_typer(app, name="hw", help="List and show hardware profiles.")
