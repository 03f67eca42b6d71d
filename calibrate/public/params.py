"""The free parameters of one (device, kernel family) and the priors that hold them.

`GroupParams` is what the fit (`calibrate.public.fitting`) produces and a transfer
(`calibrate.public.transfer`) lends; `engine_family` maps an engine to the kernel family whose
efficiencies it shares. Overview of the whole fit: `calibrate/public_fit.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from sim.catalog.engine_config import backend_family, kernel_family_of
from sim.catalog.hardware import Efficiency
from sim.catalog.quant import base_class


# ---- kernel families and weight classes ---------------------------------------------------------

def engine_family(engine: str, settings: dict | None = None, backend: str = "") -> str:
    """The kernels an engine runs (what its efficiencies are shared with): its preset's `kernel_family`
    (sim/catalog/engines). LM Studio runs MLX or llama.cpp: a row naming its runtime takes that preset's.
    With the row's `backend`, a ggml row of llama.cpp's Vulkan or ROCm/HIP backend is its own family
    (`ggml-vulkan`, `ggml-rocm`: sim.catalog.engine_config.backend_family), fitted apart from the CUDA
    and Metal rows (`ggml`): other kernels (Vulkan's GLSL shaders; HIP builds of the CUDA kernels
    without its MMA paths) reach other shares of the same device. Without it, the base family."""
    runtime = str((settings or {}).get("runtime", "")).lower() if engine == "lmstudio" else ""
    if runtime:
        engine = "mlx" if runtime.startswith("mlx") else "llama.cpp"
    family = kernel_family_of(engine)
    return backend_family(backend.strip().lower()) if family == "ggml" and backend else family


# ---- parameters ---------------------------------------------------------------------------------

# Priors (log-normal: centre, sigma in natural-log units). Centres are the generic values the
# profiles carried before this fit (sim/catalog/hardware.py Efficiency defaults; FlashAttention-2 at ~35% of
# bf16 peak, arXiv 2307.08691); sigmas are wide (x2.7 per unit) so data wins wherever it speaks.
PRIOR_BANDWIDTH = (0.75, 1.0)
PRIOR_COMPUTE = (0.4, 3.0)
PRIOR_ATTENTION = (0.3, 3.0)
# floor: a normal prior in ms (not log: a floor near 0 must be free to grow to milliseconds, which a
# log scale makes a flat, gradient-free climb); 5 ms wide
PRIOR_FLOOR_MS = (0.1, 5.0)
# per-sequence cost: normal prior around 0 ms, 50 us wide (a decode row's sampling, norms and rope are
# microseconds to tens of microseconds of GPU time; a group must show more with rows over many batch
# sizes — 3 rows at one batch size cannot tell it from the iteration floor)
PRIOR_SEQ_MS = (0.0, 0.05)
# GEMM start-up n_1/2 in rows (sim.cost `_layer_matmul_flops`): normal prior at 0, 128 rows wide; with
# dense prompts of >= 512 rows it barely shows, with a MoE prompt's few rows per expert it dominates
PRIOR_HALF_ROWS = (0.0, 128.0)
# A row's log error is measured against ROW_SIGMA: the scatter between two published measurements of
# the same setup (builds, drivers, clocks) is about 10%, so a 10% miss weighs as much as a one-sigma
# move of a prior. Past ROBUST_SCALE sigmas (15%) a row pulls linearly, not quadratically
# (soft_l1): one misprinted or mislabelled figure cannot drag a whole device.
ROW_SIGMA = 0.1
ROBUST_SCALE = 1.5
def robust_loss(r) -> float:
    """The fit's soft-L1 loss of residuals `r` in ROW_SIGMA units: quadratic up to ROBUST_SCALE, linear
    past it (scipy least_squares' soft_l1 with f_scale = ROBUST_SCALE, x 2 f_scale^2)."""
    r = np.asarray(r, dtype=float)
    return float(np.sum(2 * ROBUST_SCALE**2 * (np.sqrt(1 + (r / ROBUST_SCALE) ** 2) - 1)))


BOUNDS = {"bandwidth": (0.05, 1.0), "compute": (0.002, 1.0), "attention": (0.005, 1.0), "floor_ms": (0.0, 30.0),
          "seq_ms": (0.0, 10.0), "half_rows": (0.0, 1024.0), "lat_us": (0.2, 50.0)}
PRIOR_LATENCY_US_SIGMA = 5.0


@dataclass
class GroupParams:
    """Fitted (or transferred) parameters of one (device, family)."""

    device: str
    family: str
    bandwidth: dict[str, float]
    compute: dict[str, float]
    attention: float
    floor_ms: float
    seq_ms: float = 0.0
    half_rows: float = 0.0
    lat_us: float | None = None  # step latency of the family's all-reduce (fitted only from TP rows)
    rows: list[str] = field(default_factory=list)  # corpus row ids the values were fitted to
    sources: list[str] = field(default_factory=list)
    transferred_from: list[str] = field(default_factory=list)  # "device/family" when not fitted here
    seen_classes: tuple[str, ...] = ()  # weight classes the group's rows measured
    current_share: float | None = None  # share of its rows run on current software (`row_is_current`)
    rows_here: int = 0  # of `rows`, those timed with this repository's scripts (source `repo:<path>`)
    # values the rows pinned down (`fit_group`, PIN_INFO): "attention", "half_rows",
    # "bandwidth:<class>", "compute:<class>"; None (a hand-made group): the attention, the GEMM
    # start-up and every efficiency of a measured class count as pinned
    pinned: frozenset | None = None
    # how closely the fitted values follow the group's rows: median |log(predicted / measured)| over
    # them (`fit_group`); None for a hand-made or transferred group. `transfer` weighs a donor by it.
    spread: float | None = None
    # every row ran without CUDA graphs (settings enforce_eager): its per-step floor and all-reduce
    # latency are eager mode's, which the presets (graphs on) do not pay; `transfer` lends neither
    eager: bool = False
    # a transferred group's `lat_us` is the device's own all-reduce micro-benchmark
    # (`allreduce_step_latency_us`): no donor of the family ran with CUDA graphs
    lat_from_microbench: bool = False
    # the rows' Fisher information on the log attention efficiency (`fit_group`; None when not fitted)
    attention_info: float | None = None
    # a fitted group whose rows carry next to no information on its attention ships one transferred
    # from these devices (`params_for`); empty when the attention is its own
    attention_from: list[str] = field(default_factory=list)
    # the K-quant mat-vec ALU cost the entry carries (`PublicCorpus.matvec_flops_for`: the fitted value
    # for llama.cpp on Apple GPUs, else None), set by the fit and the transfer from their corpus
    kquant_matvec_flops: float | None = None
    # a transfer to a llama.cpp backend family that no other device has rows of (ggml-vulkan, ggml-rocm)
    # borrows its base family's fits (`transfer`): that family; empty when the donors are of `family`
    donor_family: str = ""

    def pins(self, what: str, cls: str = "") -> bool:
        """Whether the group's rows pinned `what` ("attention", "half_rows", "bandwidth", "compute") of `cls`."""
        if self.pinned is None:
            return what in ("attention", "half_rows") or cls in self.seen_classes
        return (f"{what}:{cls}" if cls else what) in self.pinned

    def compute_for(self, cls: str) -> float:
        """Matmul efficiency of a weight class; an unmeasured class takes the geometric mean of the others."""
        return _class_value(self.compute, cls, PRIOR_COMPUTE[0])

    def bandwidth_for(self, cls: str) -> float:
        """Bandwidth efficiency of a weight class's kernels (GEMV of quantized weights dequantizes
        on the fly and reaches less of the bus than a plain fp16 GEMV)."""
        return _class_value(self.bandwidth, cls, PRIOR_BANDWIDTH[0])

    @cached_property
    def efficiency(self) -> Efficiency:
        """These values as the profile entry they become (sim.catalog.hardware.Efficiency): an unmeasured
        weight class falls back to `compute` / `bandwidth`, the geometric means of the measured ones."""
        return Efficiency(
            compute=_class_value(self.compute, "", PRIOR_COMPUTE[0]),
            bandwidth=_class_value(self.bandwidth, "", PRIOR_BANDWIDTH[0]),
            compute_by_class=self.compute, bandwidth_by_class=self.bandwidth, attention_of_peak=self.attention,
            floor_ms=self.floor_ms, per_sequence_ms=self.seq_ms, matmul_half_rows=self.half_rows,
            interconnect_latency_us=self.lat_us,
            kquant_matvec_flops_per_weight=self.kquant_matvec_flops,
        )


def _class_value(values: dict[str, float], cls: str, default: float) -> float:
    """A class's value: its own, else its dense class's for a MoE class (`base_class`), else the
    geometric mean of the dense classes measured (of all when only MoE classes were), else `default`."""
    if cls in values:
        return values[cls]
    if base_class(cls) in values:
        return values[base_class(cls)]
    dense = [v for c, v in values.items() if base_class(c) == c] or list(values.values())
    return float(np.exp(np.mean(np.log(dense)))) if dense else default
