"""Turn fitted cost parameters into a hardware profile, write it atomically, transfer efficiencies.

A calibrated profile states the machine the way a datasheet-based one does — peak bandwidth,
peak FLOP/s, efficiencies, overheads — so the simulator needs nothing special to use it:

- peaks are the raw probe numbers (STREAM-copy bandwidth, fp32 GEMM FLOP/s);
- efficiency = fitted effective rate / peak (`CostParams.from_profile` multiplies them back);
- overheads are the fitted ones (ms);
- `calibration` holds the provenance: machine, llama.cpp version, model file and quantization,
  date, every probe point with its prediction, and the fit quality.

Where a fitted rate exceeds its raw peak (llama.cpp's int8 dot products can beat numpy's fp32 SGEMM;
a cache-resident model streams faster than DRAM) an efficiency cannot exceed 1, so that format's
peak is raised to the fitted rate, efficiency 1, and `calibration.peaks_raised` says so. Either
way `CostParams.from_profile(profile, quant, engine)` reproduces the fitted parameters exactly;
`build_profile` checks it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

import yaml

from sim.catalog.hardware import Efficiency, HardwareProfile
from sim.catalog.quant import QuantFormat
from sim.cost.params import CostParams
from sim.errors import ConfigError

ATTENTION_FORMAT = "bf16"  # the format sim.cost prices attention in (falls back to fp32 on CPUs)
_VENDORS = {"AuthenticAMD": "AMD", "GenuineIntel": "Intel", "ARM": "Arm"}


def _round(x: float, digits: int = 6) -> float:
    """Round to `digits` significant digits (keeps the YAML readable; far below measurement noise)."""
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - int(math.floor(math.log10(abs(x)))))


def build_profile(
    *,
    name: str,
    params: CostParams,
    quant: QuantFormat,
    raw_bandwidth_bytes_per_s: float,
    raw_matmul_flops_per_s: float,
    memory_bytes: float | None,
    kind: Literal["cpu", "gpu", "unified-soc"] = "cpu",
    display_name: str = "",
    vendor: str = "",
    engine: str = "llama.cpp",
    calibration: dict,
    notes: str = "",
) -> HardwareProfile:
    """A HardwareProfile whose `CostParams.from_profile(.., quant, engine)` equals `params`."""
    bw_peak = raw_bandwidth_bytes_per_s
    peaks_tflops: dict[str, float] = {"fp32": raw_matmul_flops_per_s / 1e12}
    raised: list[str] = []

    def peak_flops(fmt: str) -> float:
        return HardwareProfile.peak_flops(_PeakView(peaks_tflops), fmt)  # same fallback chain

    if params.bandwidth_bytes_per_s > bw_peak:
        raised.append(
            f"memory bandwidth: fitted {params.bandwidth_bytes_per_s / 1e9:.1f} GB/s > STREAM copy "
            f"{bw_peak / 1e9:.1f} GB/s (working set partly cache-resident); peak set to the fitted rate"
        )
        bw_peak = params.bandwidth_bytes_per_s
    eff_bw = params.bandwidth_bytes_per_s / bw_peak

    fmt = quant.compute_format
    if params.matmul_flops_per_s > peak_flops(fmt):
        raised.append(
            f"{fmt} matmul: fitted {params.matmul_flops_per_s / 1e9:.1f} GFLOP/s > fp32 GEMM "
            f"{raw_matmul_flops_per_s / 1e9:.1f} GFLOP/s (llama.cpp's int8 dot products); {fmt} peak set to the fitted rate"
        )
        peaks_tflops[fmt] = params.matmul_flops_per_s / 1e12
    eff_c = params.matmul_flops_per_s / peak_flops(fmt)

    att_ceiling = peak_flops(ATTENTION_FORMAT) * eff_c
    if params.attention_flops_per_s > att_ceiling:
        raised.append(
            f"{ATTENTION_FORMAT} attention: fitted {params.attention_flops_per_s / 1e9:.1f} GFLOP/s above "
            f"peak x compute efficiency; {ATTENTION_FORMAT} peak raised so attention efficiency is 1"
        )
        peaks_tflops[ATTENTION_FORMAT] = params.attention_flops_per_s / eff_c / 1e12
        # Raising bf16 must not move the matmul format's peak (it may fall back to bf16).
        if fmt != ATTENTION_FORMAT and fmt not in peaks_tflops:
            peaks_tflops[fmt] = raw_matmul_flops_per_s / 1e12
        eff_c = params.matmul_flops_per_s / peak_flops(fmt)
    eff_a = params.attention_flops_per_s / (peak_flops(ATTENTION_FORMAT) * eff_c)

    date = calibration.get("date", "")
    eff = Efficiency(
        compute=min(1.0, eff_c), bandwidth=min(1.0, eff_bw), attention=min(1.0, eff_a),
        source=f"infersim calibrate {date} ({calibration.get('method', 'probes')})".strip(),
    )
    cal = dict(calibration)
    cal["engine"] = engine
    cal["peaks_raised"] = raised
    profile = HardwareProfile(
        name=name,
        display_name=display_name or name,
        kind=kind,
        vendor=vendor,
        memory_capacity_gb=(memory_bytes or 1e9) / 1e9,
        memory_bandwidth_gb_per_s=bw_peak / 1e9,
        peak_tflops=peaks_tflops,
        iteration_overhead_ms=params.iteration_overhead_s * 1e3,
        per_sequence_overhead_ms=params.per_sequence_overhead_s * 1e3,
        matmul_half_rows=params.matmul_half_rows,
        decode_attention_slowdown=params.decode_attention_slowdown,
        efficiency=eff,
        engine_efficiency={engine: eff},
        notes=notes,
        calibration=cal,
    )
    check_reproduces(profile, params, quant, engine)
    return profile


class _PeakView:
    """Just enough of a HardwareProfile for `HardwareProfile.peak_flops` to resolve a format."""

    def __init__(self, peak_tflops: dict[str, float]) -> None:
        self.peak_tflops = peak_tflops


def check_reproduces(profile: HardwareProfile, params: CostParams, quant: QuantFormat, engine: str) -> None:
    """Assert that the profile gives back the fitted parameters through the simulator's own path."""
    from sim.catalog.engine_config import load_engine

    try:
        eng = load_engine(engine)
    except ConfigError:
        eng = None
    back = CostParams.from_profile(profile, quant, eng)
    for f in CostParams.FIELDS:
        a, b = getattr(back, f), getattr(params, f)
        if not math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12):
            raise AssertionError(f"calibrated profile does not reproduce {f}: {a} != {b}")


# ---- writing ---------------------------------------------------------------------------------------


def _plain(obj):
    """Make a structure safe for yaml.safe_dump (tuples -> lists, numpy scalars -> floats)."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        return obj.item()
    return obj


class _ProfileDumper(yaml.SafeDumper):
    """safe_dump, with lists of numbers on one line ([0.013, 0.012, ...]): a profile keeps every
    timed run of every probe point, which one number per line would stretch over thousands of lines."""


def _represent_list(dumper: yaml.SafeDumper, data: list):
    numbers = bool(data) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True if numbers else None)


_ProfileDumper.add_representer(list, _represent_list)


def profile_to_yaml(profile: HardwareProfile) -> str:
    data = profile.model_dump(mode="json", exclude_defaults=False)
    data["memory_bandwidth_gb_per_s"] = _round(data["memory_bandwidth_gb_per_s"])
    data["peak_tflops"] = {k: _round(v) for k, v in data["peak_tflops"].items()}
    for key in ("iteration_overhead_ms", "per_sequence_overhead_ms", "memory_capacity_gb"):
        data[key] = _round(data[key])
    header = (
        f"# Calibrated by `infersim calibrate` on {profile.calibration.get('date', '?') if profile.calibration else '?'}.\n"
        "# peaks = raw probes of this machine; efficiency = fitted / peak; overheads fitted.\n"
        "# `calibration` records the machine, versions, model, every probe point and the fit quality.\n"
    )
    return header + yaml.dump(_plain(data), Dumper=_ProfileDumper, sort_keys=False, width=120)


def write_profile_atomic(profile: HardwareProfile, path: str | Path) -> Path:
    """Write the profile YAML so that readers see the old file or the complete new one, never half.

    The text goes to a temporary file in the same folder, is flushed and fsynced, then renamed
    over the target with `os.replace` (atomic on POSIX and Windows within one filesystem). An
    interruption at any point before the rename leaves the target untouched and removes the
    temporary file.
    """
    from sim.files import atomic_write_text

    return atomic_write_text(Path(path), profile_to_yaml(profile), field="--out")


