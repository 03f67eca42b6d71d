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

import json
import math
from pathlib import Path
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


def expected_error(hw: "HardwareProfile", engine: "EngineConfig | None", *, concurrency: float | None = None,
                   rate: float | None = None) -> dict:
    """{"basis": one line, "figures": {figure: {"pct", "n", "kind", "basis"}}, "family", "transferred_from",
    "serving": serving_error(...)}.

    Empty `figures` when nothing measured backs the profile for this engine (then `basis` says so).
    `serving` is the band of figures under load (`serving_error`), given the load when it is known."""
    out = _kernel_error(hw, engine)
    if engine is not None:
        out["serving"] = serving_error(engine.name, hw.name, concurrency=concurrency, rate=rate)
    return out


def _kernel_error(hw: "HardwareProfile", engine: "EngineConfig | None") -> dict:
    name = engine.name if engine is not None else None
    # a llama.cpp engine's family is its backend's (ggml-vulkan, ggml-rocm), else ggml where that is unfitted
    family = engine.efficiency_family(hw) if engine is not None else None
    if family and family.startswith("ggml-") and family not in hw.engine_efficiency:
        family = "ggml"
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
    """One line for a terminal: 'expected error: TTFT ±12% · TPOT ±8% ... (basis)', then the band
    under load (`describe_serving`) when there is one."""
    line = _describe_kernel(err)
    serving = err.get("serving")
    if serving:
        line += "\n" + describe_serving(serving)
    return line


def _describe_kernel(err: dict) -> str:
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


def expected_error_for(hw_name: str, engine_name: str | None, *, concurrency: float | None = None,
                       rate: float | None = None) -> dict:
    """`expected_error` by profile and preset names (for commands that hold only names)."""
    from sim.catalog.engine_config import load_engine
    from sim.catalog.hardware import load_profile

    hw = load_profile(hw_name)
    eng = load_engine(engine_name).for_hardware(hw) if engine_name else None
    return expected_error(hw, eng, concurrency=concurrency, rate=rate)


# ---- figures under load: bands from the serving corpus --------------------------------------------
#: sim/catalog/data/serving_bands.json, written by benchmarks/serving_fit.py (calibrate/serving/bands.py):
#: per engine family and metric, the signed band [lo_pct, hi_pct] of predicted / measured - 1 of
#: serving-corpus rows (benchmarks/serving) replayed with the presets, every row held out by source,
#: widened by a factor chosen by leave-one-source-out so that a source the bands never saw falls
#: inside 80% of the time; per family, the devices and the largest loads of the replayed curves; the
#: band of all families for a device without serving rows. A band with `pct` alone (older files)
#: reads as +-pct.
SERVING_BANDS = Path(__file__).parent / "data" / "serving_bands.json"
SERVING_LABELS = {"ttft_p50": "TTFT", "ttft_p99": "TTFT p99", "tpot_itl": "TPOT", "output_tps": "throughput"}
_SERVING_CACHE: dict[str, dict] = {}


def _serving_data(path: Path | None = None) -> dict:
    p = Path(path or SERVING_BANDS)
    key = str(p)
    if key not in _SERVING_CACHE:
        try:
            _SERVING_CACHE[key] = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            _SERVING_CACHE[key] = {}
    return _SERVING_CACHE[key]


def serving_error(engine: str, hw_name: str, *, concurrency: float | None = None, rate: float | None = None,
                  path: Path | None = None, data: dict | None = None) -> dict:
    """The band of figures under load for `engine` (a preset name, a release such as vllm@0.7 is its
    family) on `hw_name`: {"figures": {metric: {"lo_pct", "hi_pct", "pct", "n", "pooled"}}, "basis", "off_device",
    "off_load", "n"}. Off support the band widens and `basis` says why:
    - a device with no serving rows of this family: the wider of the family's band and the band of
      all families on all devices (`bands_off_device`);
    - a load past the largest any replayed curve of this family reached (a closed loop's concurrency,
      an open loop's rate): x `off_support_factor`.
    An engine without replayable rows takes the band of all engines (and says so); empty `figures`
    only when the bands file holds none."""
    data = _serving_data(path) if data is None else data  # `data`: a bands file's content (the fit's coverage check)
    family = str(engine).split("@")[0]
    bands = (data.get("bands") or {}).get(family)
    support = (data.get("support") or {}).get(family)
    pooled = (data.get("bands") or {}).get("*")
    if not bands or not support:
        if not pooled:
            return {"figures": {}, "n": 0, "off_device": False, "off_load": False,
                    "basis": f"no replayable serving-corpus rows of {family}: error under load unknown"}
        # an engine the corpus has no replayable rows of: the band of all engines, on their loads
        all_support = (data.get("support") or {}).values()
        bands = pooled
        support = {"devices": [], "max_concurrency": max((x.get("max_concurrency") or 0 for x in all_support), default=0),
                   "max_rate": max((x.get("max_rate") or 0 for x in all_support), default=0)}
        notes = [f"no replayable serving rows of {family}: the band of all engines"]
    else:
        notes = []
    figures = {m: _signed(v) for m, v in bands.items()}
    off_device = hw_name not in support.get("devices", [])
    if off_device:
        # the widest of: this family's by-device band, all families' by-device band (a family measured
        # on one device has no transfer of its own to learn from), the by-source band; side by side
        off = data.get("bands_off_device") or {}
        for m, v in list(figures.items()):
            for d in ((off.get(family) or {}).get(m), (off.get("*") or {}).get(m)):
                if d:
                    figures[m] = _union(figures[m], _signed(d))
        if support.get("devices"):
            notes.append(f"no serving rows of {family} on {hw_name}: the wider of its and all engines' bands")
    off_load = False
    if concurrency is not None and concurrency > (support.get("max_concurrency") or 0.0):
        off_load = True
        notes.append(f"concurrency {concurrency:g} is past the largest fitted ({support.get('max_concurrency') or 0:g})")
    if rate is not None and math.isfinite(rate) and rate > (support.get("max_rate") or 0.0):
        off_load = True
        notes.append(f"rate {rate:g}/s is past the largest fitted ({support.get('max_rate') or 0:g}/s)")
    if off_load:
        f = float(data.get("off_support_factor") or 2.0)
        figures = {m: _widen(v, f) for m, v in figures.items()}
        notes.append(f"bands x{f:g}")
    n = max((v.get("n", 0) for v in figures.values()), default=0)
    err = "error = predicted / measured - 1, held out by source"
    basis = (f"80% of held-out serving-corpus rows of {family} ({err}, {', '.join(support.get('devices', []))})"
             if support.get("devices") else f"80% of held-out serving-corpus rows of all engines ({err})")
    if notes:
        basis += "; WIDENED: " + "; ".join(notes)
    return {"figures": figures, "n": n, "off_device": off_device, "off_load": off_load, "basis": basis}


def _signed(v: dict) -> dict:
    """A band entry with its signed sides: `lo_pct` <= `hi_pct` (an entry with `pct` alone: +-pct,
    centred on 0) and `pct` the larger side."""
    out = dict(v)
    if "lo_pct" not in out:
        out.update(lo_pct=-out["pct"], hi_pct=out["pct"], signed=False)
    out.setdefault("center_pct", 0.0)
    out["pct"] = max(abs(out["lo_pct"]), abs(out["hi_pct"]))
    return out


def _union(a: dict, b: dict) -> dict:
    """The wider of two bands, side by side (n and pooled from the one with the larger `pct`)."""
    out = dict(a if a["pct"] >= b["pct"] else b)
    out["lo_pct"], out["hi_pct"] = min(a["lo_pct"], b["lo_pct"]), max(a["hi_pct"], b["hi_pct"])
    out["pct"] = max(abs(out["lo_pct"]), abs(out["hi_pct"]))
    return out


def _widen(v: dict, f: float) -> dict:
    """The band x f: a signed band's sides moved f times as far from its centre in log(predicted /
    measured) (so the lower side stays above -100%); a +-pct band's pct x f."""
    out = dict(v)
    if out.get("signed") is False:
        out["pct"] = round(out["pct"] * f, 1)
        out["lo_pct"], out["hi_pct"] = -out["pct"], out["pct"]
        return out
    c = math.log1p(out["center_pct"] / 100)
    for side in ("lo_pct", "hi_pct"):
        side_r = math.log1p(max(out[side], -99.9) / 100)  # a side printed as -100% (0.1% rounding): -99.9%
        out[side] = max(round(100 * math.expm1(c + f * (side_r - c)), 1), -99.9)
    out["pct"] = max(abs(out["lo_pct"]), abs(out["hi_pct"]))
    return out


def inside(v: dict, error: float) -> bool:
    """Whether a residual (predicted / measured - 1) lies inside band entry `v` (as printed: 0.1%)."""
    b = _signed(v)
    return b["lo_pct"] <= round(100 * error, 1) <= b["hi_pct"]


def describe_serving(err: dict) -> str:
    """'expected error under load: TTFT -30%/+45% · TTFT p99 ... · TPOT ... · throughput ... (basis)'
    (a band without signed sides prints +-pct)."""
    figs = err.get("figures") or {}
    if not figs:
        return f"expected error under load: {err.get('basis', 'unknown')}"

    def band(v: dict) -> str:
        b = _signed(v)
        return f"±{b['pct']:.0f}%" if b.get("signed") is False else f"{b['lo_pct']:+.0f}%/{b['hi_pct']:+.0f}%"

    parts = [f"{SERVING_LABELS[m]} {band(figs[m])} (n={figs[m]['n']}{', all engines' if figs[m].get('pooled') else ''})"
             for m in SERVING_LABELS if m in figs]
    return f"expected error under load: {' · '.join(parts)} — {err['basis']}"
