"""Hardware profiles: what an accelerator (or CPU, or unified-memory SoC) can do.

A profile is a YAML file in `hardware_profiles/` (shipped as package data) or anywhere on disk,
loaded into a frozen pydantic `HardwareProfile`. Units are in the field names. Every shipped
profile cites its datasheet in `sources`; calibrated profiles carry `calibration` provenance.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sim.errors import ConfigError, pydantic_error_to_config_error

NumberFormat = Literal["fp32", "bf16", "fp16", "fp8", "fp4", "int8", "int4"]

_FROZEN = ConfigDict(extra="forbid", frozen=True)


class Source(BaseModel):
    """Where a figure came from: a datasheet address and what was read there."""

    model_config = _FROZEN
    url: str
    what: str = ""


class Efficiency(BaseModel):
    """Achieved / peak ratios, each in (0, 1].

    - `compute`: sustained dense-matmul FLOP/s over the datasheet peak (GEMM efficiency).
    - `bandwidth`: sustained memory read bandwidth over the datasheet peak (e.g. STREAM-like).
    - `attention`: efficiency of attention FLOPs relative to `compute` (attention kernels with
      softmax and masking run below GEMM efficiency; FlashAttention-2 reports ~50–70% of GEMM).
    """

    model_config = _FROZEN
    compute: float = Field(0.6, gt=0, le=1)
    bandwidth: float = Field(0.8, gt=0, le=1)
    attention: float = Field(0.6, gt=0, le=1)
    source: str = ""


class Price(BaseModel):
    model_config = _FROZEN
    rental_usd_per_hour: float | None = Field(None, ge=0)
    purchase_usd: float | None = Field(None, ge=0)
    source: str = ""


class HardwareProfile(BaseModel):
    """One accelerator (one device of a multi-device node), as the cost model sees it."""

    model_config = _FROZEN

    name: str
    display_name: str = ""
    kind: Literal["gpu", "unified-soc", "cpu"]
    vendor: str = ""
    memory_capacity_gb: float = Field(gt=0, description="device memory, decimal GB (1e9 bytes)")
    usable_memory_fraction: float = Field(
        0.9, gt=0, le=1, description="share of memory the serving process may use for weights + KV"
    )
    memory_bandwidth_gb_per_s: float = Field(gt=0, description="datasheet peak, decimal GB/s")
    peak_tflops: dict[NumberFormat, float] = Field(
        description="dense (no 2:4 sparsity) peak tensor throughput per number format, TFLOP/s (TOPS for int)"
    )
    interconnect_bandwidth_gb_per_s: float | None = Field(
        None, gt=0, description="per-device, per-direction device-to-device bandwidth (NVLink, xGMI, PCIe)"
    )
    interconnect_latency_us: float = Field(5.0, ge=0, description="per collective step latency")
    host_bandwidth_gb_per_s: float | None = Field(
        None, gt=0, description="host<->device link (PCIe) for offload; None for unified memory"
    )
    iteration_overhead_ms: float = Field(
        0.0, ge=0, description="fixed cost per engine iteration (kernel launches, sync) on this device"
    )
    per_sequence_overhead_ms: float = Field(
        0.0, ge=0, description="cost per sequence per iteration (sampling, bookkeeping) on this device"
    )
    efficiency: Efficiency = Efficiency()
    engine_efficiency: dict[str, Efficiency] = Field(
        default_factory=dict, description="per-engine overrides of `efficiency`, where measured"
    )
    power_w: float | None = Field(None, gt=0, description="board / system power under load (TDP)")
    price: Price = Price()
    sources: list[Source] = Field(default_factory=list)
    notes: str = ""
    calibration: dict | None = Field(None, description="provenance of a calibrated profile")

    @field_validator("peak_tflops")
    @classmethod
    def _positive_peaks(cls, v: dict[str, float]) -> dict[str, float]:
        for fmt, tf in v.items():
            if not tf > 0:
                raise ValueError(f"peak_tflops.{fmt} must be > 0, got {tf}")
        if not v:
            raise ValueError("at least one number format is required")
        return v

    # ---- derived quantities (SI units) -------------------------------------------------------
    @property
    def memory_bytes(self) -> float:
        return self.memory_capacity_gb * 1e9

    @property
    def usable_memory_bytes(self) -> float:
        return self.memory_bytes * self.usable_memory_fraction

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.memory_bandwidth_gb_per_s * 1e9

    def peak_flops(self, fmt: str) -> float:
        """Dense peak FLOP/s for a number format.

        Falls back to the nearest wider format the chip has (a chip with no fp8 units runs fp8
        weights by upcasting to bf16/fp16): fp4 -> fp8 -> bf16 -> fp16 -> fp32; int4 -> int8 -> ...
        """
        chains = {
            "fp4": ["fp4", "fp8", "bf16", "fp16", "fp32"],
            "fp8": ["fp8", "bf16", "fp16", "fp32"],
            "bf16": ["bf16", "fp16", "fp32"],
            "fp16": ["fp16", "bf16", "fp32"],
            "fp32": ["fp32", "fp16", "bf16"],
            "int4": ["int4", "int8", "fp16", "bf16", "fp32"],
            "int8": ["int8", "fp16", "bf16", "fp32"],
        }
        for f in chains.get(fmt, [fmt, "bf16", "fp16", "fp32"]):
            if f in self.peak_tflops:
                return self.peak_tflops[f] * 1e12
        return max(self.peak_tflops.values()) * 1e12

    def efficiency_for(self, engine: str | None) -> Efficiency:
        if engine and engine in self.engine_efficiency:
            return self.engine_efficiency[engine]
        return self.efficiency


# ---- finding and loading ---------------------------------------------------------------------


def shipped_profiles_dir() -> Path:
    import hardware_profiles

    return Path(hardware_profiles.__file__).parent


def user_profiles_dir() -> Path:
    """Where calibrated profiles go: $INFERSIM_HOME/profiles or ~/.config/infersim/profiles."""
    base = os.environ.get("INFERSIM_HOME")
    if base:
        return Path(base) / "profiles"
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(xdg) / "infersim" / "profiles"


def _search_dirs() -> list[Path]:
    return [user_profiles_dir(), shipped_profiles_dir()]


def available_profiles() -> dict[str, Path]:
    """Profile name -> file, user profiles shadowing shipped ones of the same name."""
    found: dict[str, Path] = {}
    for d in reversed(_search_dirs()):
        if d.is_dir():
            for p in sorted(d.glob("*.yaml")):
                found[p.stem] = p
    return dict(sorted(found.items()))


def load_profile_file(path: str | Path) -> HardwareProfile:
    path = Path(path)
    if not path.is_file():
        raise ConfigError("file not found", file=path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise ConfigError(f"invalid YAML: {getattr(e, 'problem', e)}", file=path, line=line) from None
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping of profile fields", file=path)
    try:
        return HardwareProfile.model_validate(data)
    except ValidationError as e:
        raise pydantic_error_to_config_error(e, file=path) from None


def load_profile(name_or_path: str | Path) -> HardwareProfile:
    """A profile by name (user folder first, then shipped) or by path to a YAML file."""
    s = str(name_or_path)
    if s.endswith((".yaml", ".yml")) or os.sep in s:
        return load_profile_file(s)
    profiles = available_profiles()
    if s in profiles:
        return load_profile_file(profiles[s])
    close = difflib.get_close_matches(s, list(profiles), n=4, cutoff=0.4)
    hint = f"; did you mean: {', '.join(close)}?" if close else f"; known: {', '.join(profiles)}"
    raise ConfigError(f"unknown hardware profile '{s}'{hint}", field="--hw")
