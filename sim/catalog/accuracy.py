"""How far to trust a prediction: the expected error of its headline figures.

A hardware profile's efficiencies per kernel family were fitted to public measurements
(calibrate/public_fit.py); each fitted entry keeps the held-out error of that fit per kind of figure
(`Efficiency.error`: prefill, decode, throughput, latency — the 80th percentile of |predicted /
measured - 1| over rows the fit did not see). This module turns that into what a `run`, `fit` or
`plan` prints under its figures and carries in `--json`:

    "decode ±8% (80% of 14 held-out public measurements of llama.cpp-family kernels on this device)"
    "no public data for torch kernels on l4: transferred from l40s; decode ±25% (held out by device)"

A figure is mapped to the kind that drives it: TTFT to prefill, TPOT/ITL to decode, throughput
and end-to-end latency to throughput/latency when those were measured, else decode (they are
decode-dominated for outputs of more than a few tokens). A locally calibrated profile quotes its
own held-out probe error instead (the median per kind of probe, calibrate/fit.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.catalog.engine_config import EngineConfig
    from sim.catalog.hardware import HardwareProfile

# headline figure -> the kinds of public measurement whose held-out error it inherits, first found wins
FIGURE_KINDS = {
    "ttft": ("prefill",),
    "tpot": ("decode",),
    "throughput": ("throughput", "decode"),
    "e2e": ("latency", "throughput", "decode"),
}


def expected_error(hw: "HardwareProfile", engine: "EngineConfig | None") -> dict:
    """{"basis": one line, "figures": {figure: {"pct", "n", "kind", "basis"}}, "family", "transferred_from"}.

    Empty `figures` when nothing measured backs the profile for this engine (then `basis` says so)."""
    name = engine.name if engine is not None else None
    family = (engine.kernel_family or engine.name) if engine is not None else None
    cal = hw.calibration or {}
    if name and name in hw.engine_efficiency and cal.get("engine") == name:
        # a local calibration: its own held-out probes (calibrate/fit.py), median |error| per kind
        fit = cal.get("fit") or {}
        by_kind = fit.get("heldout_median_abs_error_by_kind") or {}
        n = int(fit.get("n_heldout") or 0)
        basis = "median of held-out calibration probes"
        figures = {}
        for fig, kinds in FIGURE_KINDS.items():
            kind = next((k for k in kinds if by_kind.get(k) is not None), None)
            if kind is not None:
                figures[fig] = {"pct": round(100 * by_kind[kind], 1), "n": n, "kind": kind, "basis": basis}
        out = {"family": family, "transferred_from": [], "figures": figures,
               "basis": f"calibrated on this machine with {name} ({cal.get('date', 'date unknown')})"}
        if cal.get("unreliable"):  # saved with `calibrate --force` although the fit failed its checks
            out["unreliable"] = list(cal["unreliable"])
        return out
    eff = hw.engine_efficiency.get(family) if family else None
    if eff is None or not eff.error:
        who = family or "this engine"
        return {"family": family, "transferred_from": [], "figures": {},
                "basis": f"no public measurements of {who} kernels on {hw.name}: efficiencies are engineering "
                         f"defaults; error unknown"}
    figures = {}
    for fig, kinds in FIGURE_KINDS.items():
        for k in kinds:
            band = eff.error.get(k)
            if band is not None:
                figures[fig] = {"pct": band.pct, "n": band.n, "kind": k, "basis": band.basis}
                break
    if eff.transferred_from:
        basis = (f"no public data for {family} kernels on {hw.name}: transferred from "
                 f"{', '.join(eff.transferred_from)}; bands are that transfer's held-out error on other devices")
    else:
        here = eff.rows_timed_here
        what = ("public measurements" if not here else
                "measurements (timed with this repository's benchmarks/gpu scripts)" if here >= len(eff.corpus_rows)
                else f"measurements ({here} timed with this repository's benchmarks/gpu scripts, the rest public)")
        basis = (f"fitted to {len(eff.corpus_rows)} {what} of {family} kernels on {hw.name}; "
                 f"80% of held-out measurements fell within these bands")
        if eff.current_build_share is not None and eff.current_build_share < 0.5:
            basis += (f"; {round(100 * (1 - eff.current_build_share))}% of them ran llama.cpp builds of 2023-24, "
                      f"which decode slower than 2025-26 builds (docs/public-calibration.md, round 13)")
    return {"family": family, "transferred_from": list(eff.transferred_from), "figures": figures, "basis": basis}


def describe(err: dict) -> str:
    """One line for a terminal: 'expected error: TTFT ±12% · TPOT ±8% ... (basis)'."""
    figs = err.get("figures") or {}
    if err.get("unreliable"):
        return (f"expected error: UNRELIABLE — the profile's calibration failed its checks and was saved with "
                f"--force ({'; '.join(err['unreliable'])}); its figures can be off by any amount — {err['basis']}")
    if not figs:
        return f"expected error: {err['basis']}"
    label = {"ttft": "TTFT", "tpot": "TPOT", "throughput": "throughput", "e2e": "e2e"}
    bases = {v["basis"] for v in figs.values()}
    if len(bases) == 1:
        ns = {v["n"] for v in figs.values()}
        if len(ns) == 1:
            parts = [f"{label[f]} ±{v['pct']:.0f}%" for f, v in figs.items()]
            tail = f" ({next(iter(bases))}, n={next(iter(ns))})"
        else:
            parts = [f"{label[f]} ±{v['pct']:.0f}% (n={v['n']})" for f, v in figs.items()]
            tail = f" ({next(iter(bases))})"
    else:
        parts = [f"{label[f]} ±{v['pct']:.0f}% ({v['basis']}, n={v['n']})" for f, v in figs.items()]
        tail = ""
    missing = [label[f] for f in FIGURE_KINDS if f not in figs]
    if missing:
        tail += f"; {', '.join(missing)}: no held-out public data"
    return f"expected error: {' · '.join(parts)}{tail} — {err['basis']}"


def expected_error_for(hw_name: str, engine_name: str | None) -> dict:
    """`expected_error` by profile and preset names (for commands that hold only names)."""
    from sim.catalog.engine_config import load_engine
    from sim.catalog.hardware import load_profile

    hw = load_profile(hw_name)
    eng = load_engine(engine_name).for_hardware(hw) if engine_name else None
    return expected_error(hw, eng)
