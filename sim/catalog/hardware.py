"""Hardware profiles: what an accelerator (or CPU, or unified-memory SoC) can do.

A profile is a YAML file in `hardware_profiles/` (shipped as package data) or anywhere on disk,
loaded into a frozen pydantic `HardwareProfile`. Units are in the field names. Every shipped
profile cites its datasheets in `sources`, says where each non-datasheet constant comes from in
`provenance` (and in the `source` strings of `efficiency` and `price`); calibrated profiles carry
`calibration` provenance.

Lookup order for a name: the user folder (`$INFERSIM_HOME/profiles`, else
`$XDG_CONFIG_HOME/infersim/profiles`, else `~/.config/infersim/profiles`) shadows the shipped
profiles. A string ending in `.yaml`/`.yml` or containing a path separator is read as a file.
"""

from __future__ import annotations

import difflib
import importlib.resources
import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sim.errors import ConfigError, pydantic_error_to_config_error

NumberFormat = Literal["fp32", "bf16", "fp16", "fp8", "fp4", "int8", "int4"]

_FROZEN = ConfigDict(extra="forbid", frozen=True)

# 1 GiB in decimal GB: vendors' "80 GB" of HBM/GDDR/LPDDR is 80 x 2^30 bytes (stacks and chips come
# in powers of two), so `memory_capacity_gib` converts with this factor.
_GB_PER_GIB = 2**30 / 1e9


class Source(BaseModel):
    """Where a figure came from: an address and what was read there."""

    model_config = _FROZEN
    url: str = Field(min_length=1)
    what: str = ""


class ErrorBand(BaseModel):
    """How far public measurements fell from held-out predictions of one kind of figure."""

    model_config = _FROZEN
    pct: float = Field(ge=0, description="80th percentile of |predicted / measured - 1| over held-out rows, %")
    n: int = Field(ge=0, description="held-out public measurements behind it")
    basis: str = ""


class Efficiency(BaseModel):
    """Achieved / peak ratios, each in (0, 1], and where they come from.

    - `compute`: sustained dense-matmul FLOP/s over the datasheet peak (GEMM efficiency).
    - `bandwidth`: sustained memory read bandwidth over the datasheet peak (STREAM-like, or derived
      from a measured bandwidth-bound decode rate).
    - `attention`: attention-kernel FLOP/s relative to the GEMM rate, i.e. attention FLOP/s =
      peak x `compute` x `attention` (softmax, masking and small head dimensions keep attention
      kernels below GEMM efficiency; FlashAttention-2 reports 50-73% of A100 peak).
    - `source`: the measurement, paper, or "engineering default pending calibration" behind them.

    Fitted to public measurements (calibrate/public_fit.py, one entry per kernel family in
    `HardwareProfile.engine_efficiency`), an entry also carries:
    - `compute_by_class` / `bandwidth_by_class`: the same ratios per weight class
      (sim.catalog.quant.kernel_class: f16, fp8, int8, fp4, gguf, mlx, int4wo, and `<class>-moe` for
      TensorRT-LLM's MoE grouped GEMMs, which falls back to `<class>`), which win over `compute` /
      `bandwidth` for a format of that class;
    - `attention_of_peak`: attention FLOP/s over the datasheet bf16 peak (then `attention` is unused);
    - `floor_ms`: the device-side cost of one engine iteration under these kernels (kernel launches
      and the gaps between them), which replaces the profile's `iteration_overhead_ms`, and
      `per_sequence_ms`, the device-side cost per sequence per iteration, which replaces its
      `per_sequence_overhead_ms`; `matmul_half_rows`, the GEMM start-up in rows (sim.cost: Hockney's
      n_1/2, paid once per routed expert a MoE batch touches), which replaces the profile's;
      `interconnect_latency_us`, one collective step of the family's all-reduce, fitted where the
      public rows ran tensor parallel (vLLM's custom all-reduce and TRT-LLM's are one-shot kernels,
      far below NCCL's ring latency), which replaces the profile's for tp/pp > 1;
    - `kquant_matvec_flops_per_weight` (llama.cpp family on Apple GPUs): FLOP-equivalents of the fp32
      ALU rate that llama.cpp's Metal mat-vec kernels spend per K-quant weight they dequantize
      (sim.catalog.quant.is_k_quant; once per step of up to 8 rows, ggml-metal's `ne11_mm_min`), a roof beside
      the weight stream (sim.cost.roofline); fitted across the Apple devices' rows
      (calibrate/public_fit.py `fit_matvec_alu`);
    - `corpus_rows`, `transferred_from`, `error`: the corpus rows (benchmarks/public) it was fitted to, the devices it was
      borrowed from when this one has none, and the held-out error per kind of figure;
    - `request_overhead_ms` (an engine's own entry only, keyed by its name: `calibrate --from-bench`): that
      engine's per-request front-end latency measured on this deployment, which replaces the preset's
      `EngineConfig.request_overhead_ms` (sim.catalog.deployment.engine_for); None = the preset's;
    - `current_build_share` (llama.cpp family, fitted entries): the share of those rows run on 2025-or-later
      llama.cpp builds (calibrate/public_fit.py `row_is_current`); below a half the entry describes
      2023-24 builds, which decode slower than today's, and the printed error basis says so;
    - `rows_timed_here`: how many of `corpus_rows` were timed with this repository's benchmarks/gpu
      scripts (corpus sources `repo:<path>`) rather than published by others, so the printed basis
      names them without reading `source`'s wording.
    """

    model_config = _FROZEN
    compute: float = Field(0.6, gt=0, le=1)
    bandwidth: float = Field(0.8, gt=0, le=1)
    attention: float = Field(0.6, gt=0, le=1)
    source: str = ""
    compute_by_class: dict[str, float] = Field(default_factory=dict)
    bandwidth_by_class: dict[str, float] = Field(default_factory=dict)
    attention_of_peak: float | None = Field(None, gt=0, le=1)
    floor_ms: float | None = Field(None, ge=0)
    per_sequence_ms: float | None = Field(None, ge=0)
    matmul_half_rows: float | None = Field(None, ge=0, le=1024)
    interconnect_latency_us: float | None = Field(None, ge=0)
    kquant_matvec_flops_per_weight: float | None = Field(None, ge=0, le=1000)
    request_overhead_ms: float | None = Field(None, ge=0)
    corpus_rows: list[str] = Field(default_factory=list)
    transferred_from: list[str] = Field(default_factory=list)
    error: dict[str, ErrorBand] = Field(default_factory=dict)
    current_build_share: float | None = Field(None, ge=0, le=1)
    rows_timed_here: int = Field(0, ge=0)

    @field_validator("compute_by_class", "bandwidth_by_class")
    @classmethod
    def _ratios(cls, v: dict[str, float]) -> dict[str, float]:
        from sim.catalog.quant import KERNEL_CLASSES

        for k, x in v.items():
            if k not in KERNEL_CLASSES:
                raise ValueError(f"unknown weight class '{k}'; known: {', '.join(KERNEL_CLASSES)}")
            if not 0 < x <= 1:
                raise ValueError(f"{k} must be in (0, 1], got {x}")
        return v

    def compute_for(self, cls: str | None) -> float:
        """Matmul efficiency for weight class `cls`: the class's own when fitted, else its dense
        class's for a MoE class (sim.catalog.quant.base_class), else `compute`."""
        return _by_class(self.compute_by_class, cls, self.compute)

    def bandwidth_for(self, cls: str | None) -> float:
        """Bandwidth efficiency for weight class `cls`, with `compute_for`'s fallbacks to `bandwidth`."""
        return _by_class(self.bandwidth_by_class, cls, self.bandwidth)


def _by_class(values: dict[str, float], cls: str | None, default: float) -> float:
    from sim.catalog.quant import base_class

    if cls in values:
        return values[cls]
    return values.get(base_class(cls), default)


class Price(BaseModel):
    """Public list prices, where one exists: rental per device-hour and purchase per device."""

    model_config = _FROZEN
    rental_usd_per_hour: float | None = Field(None, ge=0)
    purchase_usd: float | None = Field(None, ge=0)
    source: str = ""


class HardwareProfile(BaseModel):
    """One accelerator (one device of a multi-device node), as the cost model sees it."""

    model_config = _FROZEN

    name: str = Field(min_length=1)
    display_name: str = ""
    kind: Literal["gpu", "unified-soc", "cpu"]
    vendor: str = ""
    generation: str = Field("", description="architecture generation (hopper, ada, apple-m4, ...): what efficiencies transfer across")
    memory_type: str = Field("", description="memory technology (hbm3, gddr6x, lpddr5x, ...)")
    compute_capability: str | None = Field(
        None, pattern=r"^[1-9][0-9]?\.[0-9]$",
        description="CUDA compute capability 'major.minor' ('9.0' Hopper, '10.0' B200); None = not an NVIDIA GPU",
    )
    package: Literal["", "pro", "max", "ultra"] = Field(
        "",
        description=(
            "how the chip is packaged, where that changes what its memory system reaches: Apple's 'pro' / "
            "'max' (one die) and 'ultra' (two Max dies joined by UltraFusion); '' = nothing to say. The "
            "public-measurement fit pools bandwidth efficiencies by package first (calibrate/public_fit.py _tier)"
        ),
    )
    memory_capacity_gb: float | None = Field(
        None, gt=0, description="device memory in decimal GB (1e9 bytes); derived when memory_capacity_gib is given"
    )
    memory_capacity_gib: float | None = Field(
        None, gt=0, description="device memory in GiB (2^30 bytes), what vendors mean by 'GB' of HBM/GDDR/LPDDR"
    )
    usable_memory_fraction: float = Field(
        0.9, gt=0, le=1, description="share of memory one serving process may fill with weights + KV cache"
    )
    memory_reported_gib: float | None = Field(
        None, gt=0,
        description=(
            "total memory the driver reports (nvidia-smi / NVML memory.total), GiB: the capacity less what "
            "the driver keeps (ECC check bits on GDDR parts, reserved regions); None = the full capacity"
        ),
    )
    memory_bandwidth_gb_per_s: float = Field(gt=0, description="datasheet peak, decimal GB/s")
    peak_tflops: dict[NumberFormat, float] = Field(
        description="dense (no 2:4 sparsity) peak throughput per number format, TFLOP/s (TOPS for int)"
    )
    interconnect_bandwidth_gb_per_s: float | None = Field(
        None, gt=0, description="per-device, per-direction device-to-device bandwidth (NVLink, xGMI, PCIe, NIC)"
    )
    interconnect_latency_us: float = Field(5.0, ge=0, description="latency of one collective step between devices")
    allreduce_bus_bandwidth_gb_per_s: float | None = Field(
        None, gt=0,
        description=(
            "bus bandwidth a ring all-reduce reaches between these devices (NCCL all_reduce_perf busbw, "
            "large messages), decimal GB/s; None = the link rate `interconnect_bandwidth_gb_per_s`. Over "
            "PCIe the host's fabric and memory set it, well below the link (sim.cost.parallel)"
        ),
    )
    scale_up_domain_devices: int | None = Field(
        None, ge=1,
        description=(
            "devices one scale-up fabric joins at `interconnect_bandwidth_gb_per_s` (an HGX baseboard's 8 "
            "GPUs on NVSwitch, a GB200 NVL72 rack's 72); tensor/expert parallelism beyond it crosses the "
            "scale-out network. None = not stated"
        ),
    )
    host_bandwidth_gb_per_s: float | None = Field(
        None, gt=0, description="per-direction host<->device link (PCIe) for offload; None for unified memory"
    )
    iteration_overhead_ms: float = Field(
        0.0, ge=0, description="device-side fixed cost per engine iteration (launch/sync floor); engine adds its own"
    )
    per_sequence_overhead_ms: float = Field(
        0.0, ge=0, description="device-side cost per sequence per iteration; engine adds its own"
    )
    matmul_half_rows: float = Field(
        0.0, ge=0, le=1024, description="Hockney n_1/2 of the multi-row matmul kernels, rows (sim.cost; 0 = plain roofline, calibrated)"
    )
    decode_attention_slowdown: float = Field(
        1.0, gt=0, le=100,
        description="cost per decode-attention FLOP over cost per prompt-attention FLOP (sim.cost; 1 = one rate, calibrated)",
    )
    efficiency: Efficiency = Efficiency()
    engine_efficiency: dict[str, Efficiency] = Field(
        default_factory=dict, description="per-engine overrides of `efficiency`, where measured"
    )
    power_w: float | None = Field(None, gt=0, description="board / package power under load (TDP)")
    price: Price = Price()
    sources: list[Source] = Field(default_factory=list)
    provenance: dict[str, str] = Field(
        default_factory=dict, description="field name -> where its (non-datasheet) value comes from"
    )
    notes: str = ""
    calibration: dict | None = Field(None, description="provenance of a calibrated profile")

    @field_validator("peak_tflops")
    @classmethod
    def _positive_peaks(cls, v: dict[str, float]) -> dict[str, float]:
        if not v:
            raise ValueError("at least one number format is required")
        for fmt, tf in v.items():
            if not tf > 0:
                raise ValueError(f"peak_tflops.{fmt} must be > 0, got {tf}")
        return v

    @field_validator("compute_capability", mode="before")
    @classmethod
    def _capability_as_written(cls, v: Any) -> Any:
        """YAML reads an unquoted `9.0` as a number: take it as the 'major.minor' text it was written as."""
        return repr(v) if isinstance(v, float) else v

    @field_validator("provenance")
    @classmethod
    def _provenance_names_fields(cls, v: dict[str, str]) -> dict[str, str]:
        unknown = sorted(k for k in v if k.split(".")[0] not in cls.model_fields)
        if unknown:
            raise ValueError(f"provenance names unknown field(s): {', '.join(unknown)}")
        return v

    @model_validator(mode="after")
    def _one_memory_capacity(self) -> HardwareProfile:
        """Accept memory in GiB or GB; when both are given they must agree (within 0.5%)."""
        gb, gib = self.memory_capacity_gb, self.memory_capacity_gib
        if gb is None and gib is None:
            raise ValueError("memory_capacity_gb or memory_capacity_gib is required")
        if gib is not None:
            derived = gib * _GB_PER_GIB
            if gb is not None and abs(gb - derived) > 0.005 * derived:
                raise ValueError(
                    f"memory_capacity_gb ({gb}) and memory_capacity_gib ({gib} = {derived:.2f} GB) disagree"
                )
            # frozen model: set the derived field once, during validation
            self.__dict__["memory_capacity_gb"] = derived if gb is None else gb
        if self.memory_reported_gib is not None and self.memory_reported_gib * 2**30 > self.memory_bytes * 1.0005:
            raise ValueError(f"memory_reported_gib ({self.memory_reported_gib}) exceeds the memory capacity "
                             f"({self.memory_bytes / 2**30:.2f} GiB)")
        return self

    # ---- derived quantities (SI units) -------------------------------------------------------
    @property
    def memory_bytes(self) -> float:
        """Device memory in bytes."""
        return float(self.memory_capacity_gb) * 1e9

    @property
    def reported_memory_bytes(self) -> float:
        """Device memory the driver hands to processes (nvidia-smi / NVML memory.total), bytes:
        `memory_reported_gib`, or `memory_bytes` when the profile does not give it."""
        return self.memory_bytes if self.memory_reported_gib is None else self.memory_reported_gib * 2**30

    @property
    def usable_memory_bytes(self) -> float:
        """Bytes one serving process may fill with weights + KV: memory_bytes x usable_memory_fraction."""
        return self.memory_bytes * self.usable_memory_fraction

    @property
    def bandwidth_bytes_per_s(self) -> float:
        """Datasheet peak memory bandwidth in bytes/s."""
        return self.memory_bandwidth_gb_per_s * 1e9

    def peak_flops(self, fmt: str) -> float:
        """Dense peak FLOP/s (OP/s for integer formats) for a number format.

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

    def efficiency_for(self, engine: str | None, family: str | None = None) -> Efficiency:
        """The engine's own measured efficiencies when the profile has them (a local calibration),
        else its kernel family's (fitted to public measurements), else the profile default."""
        if engine and engine in self.engine_efficiency:
            return self.engine_efficiency[engine]
        if family and family in self.engine_efficiency:
            return self.engine_efficiency[family]
        if family and family.startswith("ggml-") and "ggml" in self.engine_efficiency:
            return self.engine_efficiency["ggml"]  # a llama.cpp backend never fitted here: its base family's
        return self.efficiency


# ---- finding and loading ---------------------------------------------------------------------


def shipped_profiles_dir() -> Path:
    """The `hardware_profiles` package folder (package data; works for editable and wheel installs)."""
    return Path(str(importlib.resources.files("hardware_profiles")))


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
    """Profile name (file stem) -> file, user profiles shadowing shipped ones of the same name."""
    found: dict[str, Path] = {}
    for d in reversed(_search_dirs()):
        if d.is_dir():
            try:  # the *.yaml and *.yml entries Path.glob yields, without its per-entry matching (~5 per replay)
                names = os.listdir(d)
            except PermissionError:  # (Path.glob lists an unreadable folder as empty)
                continue
            for p in sorted(d / n for n in names if n.endswith((".yaml", ".yml"))):
                found[p.stem] = p
    return dict(sorted(found.items()))


def _key_lines(node: yaml.Node, path: tuple = (), out: dict | None = None) -> dict[tuple, int]:
    """Map every key path in a composed YAML document to its 1-based line; reject duplicate keys.

    yaml.safe_load silently keeps the last of two equal keys; a profile with a duplicated field is
    almost always an editing mistake, so it is an error here.
    """
    out = {} if out is None else out
    if isinstance(node, yaml.MappingNode):
        seen: set = set()
        for key_node, value_node in node.value:
            key = key_node.value
            if key in seen:
                raise ConfigError("duplicate key", line=key_node.start_mark.line + 1, field=".".join(map(str, (*path, key))))
            seen.add(key)
            out[(*path, key)] = key_node.start_mark.line + 1
            _key_lines(value_node, (*path, key), out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out[(*path, i)] = item.start_mark.line + 1
            _key_lines(item, (*path, i), out)
    return out


def _line_of(loc: tuple, lines: dict[tuple, int]) -> int | None:
    """Line of the deepest prefix of a pydantic error location that exists in the file."""
    loc = tuple(str(p) if not isinstance(p, int) else p for p in loc)
    for n in range(len(loc), 0, -1):
        if loc[:n] in lines:
            return lines[loc[:n]]
    return None


# libyaml when pyyaml was built with it: a profile (with its generated efficiency block) parses in
# ~2 ms instead of ~60 ms with the pure-Python loader (issue 17)
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _parse_yaml(text: str, loader_cls) -> tuple[Any, Any]:
    """(node, data): the composed document (for line numbers and duplicate keys) and the values
    `yaml.safe_load` gives, from one parse."""
    loader = loader_cls(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    return node, data


def parse_profile(text: str, *, origin: str | Path) -> HardwareProfile:
    """Validate YAML text as a profile; every problem is one `ConfigError` naming file, line, field."""
    try:
        node, data = _parse_yaml(text, _YAML_LOADER)
    except yaml.YAMLError as e:
        error = e
    else:
        error = None
    if error is not None and _YAML_LOADER is not yaml.SafeLoader:
        # libyaml words some problems differently: report them as the pure-Python parser does
        try:
            node, data = _parse_yaml(text, yaml.SafeLoader)
            error = None
        except yaml.YAMLError as e:
            error = e
    if error is not None:
        mark = getattr(error, "problem_mark", None)
        # a problem found at end of stream is reported on the last line of the file
        line = min(mark.line + 1, max(1, len(text.splitlines()))) if mark is not None else None
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        context, cmark = getattr(error, "context", None), getattr(error, "context_mark", None)
        if context and cmark is not None:
            problem += f" ({context} started on line {cmark.line + 1})"
        raise ConfigError(f"invalid YAML: {problem}", file=origin, line=line) from None
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping of profile fields (name: ..., kind: ...)", file=origin, line=1)
    try:
        lines = _key_lines(node) if node is not None else {}
    except ConfigError as e:
        raise ConfigError(e.problem, file=origin, line=e.line, field=e.field) from None
    try:
        return HardwareProfile.model_validate(data)
    except ValidationError as e:
        errs = e.errors()
        line = _line_of(tuple(errs[0].get("loc", ())), lines) if errs else None
        err = pydantic_error_to_config_error(e, file=origin, line=line)
        if err.field and err.field.endswith(".[key]"):  # pydantic's marker for a bad mapping key
            err = ConfigError(err.problem, file=origin, line=line, field=err.field[: -len(".[key]")])
        raise err from None


# Parsed profiles by (file, text): a profile is frozen, and the public fit's transfer rules look up the
# same dozen profiles ~10,000 times per fit (12 of its 75 s went to parsing YAML and validating). Keyed
# on the text, not the modification time (whose clock ticks coarser than two quick writes), so a file
# written again (the fit writes its results into the profiles) is parsed again.
_PARSED: dict[tuple[str, str], HardwareProfile] = {}
_PARSED_MAX = 256


def load_profile_file(path: str | Path) -> HardwareProfile:
    """Read and validate one profile YAML file (parsed once per text of the file)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("file not found" if not path.is_dir() else "is a folder, not a YAML file", file=path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read: {e}", file=path) from None
    key = (str(path), text)
    profile = _PARSED.get(key)
    if profile is None:
        profile = parse_profile(text, origin=path)
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[key] = profile
    return profile


def _names_a_file(s: str) -> bool:
    """A --hw value that is a path (ends in .yaml/.yml or has a separator), not a profile name."""
    return s.endswith((".yaml", ".yml")) or os.sep in s or "/" in s


def profile_path(name_or_path: str | Path) -> Path | None:
    """The file a profile name or path names (the user's profile of that name shadowing the
    shipped one); None when there is none."""
    s = str(name_or_path)
    return Path(s) if _names_a_file(s) else available_profiles().get(s)


def load_profile(name_or_path: str | Path) -> HardwareProfile:
    """A profile by name (user folder first, then shipped) or by path to a YAML file."""
    s = str(name_or_path)
    if _names_a_file(s):
        return load_profile_file(s)
    profiles = available_profiles()
    if s in profiles:
        return load_profile_file(profiles[s])
    # names containing what was typed first ("h100" -> h100-sxm, h100-pcie), then spelling neighbours
    containing = [n for n in profiles if s.lower() in n]
    close = list(dict.fromkeys(containing + difflib.get_close_matches(s, list(profiles), n=4, cutoff=0.4)))[:4]
    hint = f"; did you mean: {', '.join(close)}?" if close else f"; known: {', '.join(profiles)}"
    raise ConfigError(f"unknown hardware profile '{s}'{hint}", field="--hw")


def with_efficiency_fields(hw: HardwareProfile, engine: str | None, family: str | None,
                           fields: dict[str, Any]) -> HardwareProfile:
    """`hw` with `fields` of one efficiency entry replaced: the entry `hw.efficiency_for(engine, family)`
    returns, i.e. the one `CostParams.from_profile` prices that engine with (sim.cost.params). A
    diagnostic's what-if, never a shipped prediction: benchmarks/amd_step_variants.py removes the profile's
    fitted per-sequence cost with {"per_sequence_ms": 0.0}, through `calibrate.serving.replay.replay`'s
    `efficiency_overrides` and `sim.bench.serve.Deployment.efficiency_overrides`. Every other entry, and
    everything physical (peaks, memory, interconnect), is kept. A field `Efficiency` does not have is a
    ConfigError."""
    unknown = sorted(set(fields) - set(Efficiency.model_fields))
    if unknown:
        raise ConfigError(f"unknown efficiency field(s): {', '.join(unknown)}", field="efficiency_overrides")
    eff = hw.efficiency_for(engine, family)
    new = eff.model_copy(update=dict(fields))
    key = next((k for k, v in hw.engine_efficiency.items() if v is eff), None)
    if key is None:  # the profile's default entry
        return hw.model_copy(update={"efficiency": new})
    return hw.model_copy(update={"engine_efficiency": {**hw.engine_efficiency, key: new}})


def apply_efficiencies(
    target: HardwareProfile,
    source: HardwareProfile,
    *,
    overheads: Literal["auto", "source", "target"] = "auto",
) -> HardwareProfile:
    """`target` with the efficiencies measured on `source`: predict a machine you do not have.

    Kept from `target`: everything physical — peaks (bandwidth, FLOP/s per format), memory,
    interconnect, price, power. Taken from `source`: `efficiency` and `engine_efficiency` (the
    achieved/peak ratios of the kernels measured there), and, when `overheads` says so, the
    per-iteration and per-sequence overheads. "auto" takes source overheads only when both
    machines are of the same kind (cpu -> cpu): a CPU's graph-building time says nothing about a
    GPU's kernel-launch overhead. The result's `calibration.efficiency_from` names the source,
    which fields came from it, and the source's calibration date and engine.
    """
    use_source_overheads = overheads == "source" or (overheads == "auto" and source.kind == target.kind)
    src_cal = source.calibration or {}
    taken = ["efficiency", "engine_efficiency"]
    update: dict = {
        "efficiency": source.efficiency,
        # the source's entries only: the target's own (fitted to public measurements of its kernel
        # families) would otherwise win over the source's generic efficiency for every engine
        "engine_efficiency": dict(source.engine_efficiency),
    }
    if use_source_overheads:
        update["iteration_overhead_ms"] = source.iteration_overhead_ms
        update["per_sequence_overhead_ms"] = source.per_sequence_overhead_ms
        # the GEMM start-up (n_1/2, sim.cost) and the decode-attention slowdown belong to the same
        # software kernels as the overheads: they travel with them (cpu -> cpu), never onto a device
        # whose kernels were not measured
        update["matmul_half_rows"] = source.matmul_half_rows
        update["decode_attention_slowdown"] = source.decode_attention_slowdown
        taken += ["iteration_overhead_ms", "per_sequence_overhead_ms", "matmul_half_rows", "decode_attention_slowdown"]
    provenance = {
        "profile": source.name,
        "fields": taken,
        "source_calibration_date": src_cal.get("date"),
        "source_engine": src_cal.get("engine"),
        "kept_from_target": ["memory_bandwidth_gb_per_s", "peak_tflops", "memory_capacity_gb"]
        + ([] if use_source_overheads
           else ["iteration_overhead_ms", "per_sequence_overhead_ms", "matmul_half_rows", "decode_attention_slowdown"]),
    }
    cal = dict(target.calibration or {})
    cal["efficiency_from"] = provenance
    # The source's overheads already contain its engine's software overhead; say so, so that
    # CostParams.from_profile does not add that engine's preset overheads a second time.
    if use_source_overheads and src_cal.get("engine"):
        cal["engine"] = src_cal["engine"]
    update["calibration"] = cal
    note = f"efficiencies from calibrated profile '{source.name}'"
    update["notes"] = f"{target.notes}; {note}" if target.notes else note
    data = target.model_dump()
    data.update({k: (v.model_dump() if hasattr(v, "model_dump") else v) for k, v in update.items()})
    data["engine_efficiency"] = {k: e.model_dump() for k, e in update["engine_efficiency"].items()}
    return HardwareProfile.model_validate(data)
