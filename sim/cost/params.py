"""The free parameters of the cost model (`CostParams`) and where a profile's values for them come from.

`sim.cost.roofline` prices an iteration with them; the calibrations (`calibrate.fit` on this
machine, `calibrate.public_fit` on public measurements) fit them; `sim.cost.parallel` scales them
per device group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, ClassVar, Sequence

import numpy as np

from sim.catalog.quant import QuantFormat
from sim.errors import ConfigError

if TYPE_CHECKING:
    from sim.catalog.engine_config import EngineConfig
    from sim.catalog.hardware import Efficiency, HardwareProfile

# Attention (QK^T, softmax, PV) runs on activations and the KV cache, which all the presets keep in
# 16-bit floats; weight-only and fp8 weight formats do not change that. A profile without bf16 falls
# back to its nearest format (`HardwareProfile.peak_flops`).
ATTENTION_FORMAT = "bf16"


@dataclass(frozen=True)
class CostParams:
    """The free parameters of the cost model, as effective (achieved) values.

    - `bandwidth_bytes_per_s`: sustained memory read bandwidth [B/s] = peak x efficiency.
    - `matmul_flops_per_s`: sustained dense-matmul throughput in the weights' compute format [FLOP/s].
    - `attention_flops_per_s`: sustained attention-kernel throughput [FLOP/s].
    - `iteration_overhead_s`: fixed cost per iteration (kernel launches, scheduling) [s].
    - `per_sequence_overhead_s`: cost per sequence per iteration (sampling, detokenization) [s].
    - `matmul_half_rows`: Hockney's n_1/2 of the multi-row matmul kernel [rows]: a matmul over n >= 2
      rows costs flops_per_row x (n + n_1/2) / matmul_flops_per_s (see the module docstring); 0 = the
      plain roofline (every preset; fitted by calibration on llama.cpp CPUs).
    - `decode_attention_slowdown`: seconds per attention FLOP of a decode token (one query row per
      sequence) over seconds per attention FLOP of a prompt token [ratio]: 1 = one attention rate
      (every preset); fitted by calibration (see the module docstring).
    - `matvec_s_per_weight`: ALU seconds the mat-vec kernels spend per weight they dequantize [s], once
      per step of up to MATVEC_MAX_ROWS rows, a roof beside the weight stream (sim.cost.roofline
      `weight_stream_s`): dequantizing a K-quant on an Apple GPU costs tens of ALU operations per
      weight, so llama.cpp's Metal decode of Q4_K_M follows the GPU's ALU rate, not its bandwidth
      (`Efficiency.kquant_matvec_flops_per_weight` / the fp32 peak). 0 = no such roof (every other
      device and format).
    """

    bandwidth_bytes_per_s: float
    matmul_flops_per_s: float
    attention_flops_per_s: float
    iteration_overhead_s: float = 0.0
    per_sequence_overhead_s: float = 0.0
    matmul_half_rows: float = 0.0
    decode_attention_slowdown: float = 1.0
    matvec_s_per_weight: float = 0.0

    FIELDS: ClassVar[tuple[str, ...]] = (
        "bandwidth_bytes_per_s",
        "matmul_flops_per_s",
        "attention_flops_per_s",
        "iteration_overhead_s",
        "per_sequence_overhead_s",
        "matmul_half_rows",
        "decode_attention_slowdown",
        "matvec_s_per_weight",
    )

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            positive = f.name.endswith("_per_s") or f.name == "decode_attention_slowdown"
            if not (math.isfinite(v) and (v > 0 if positive else v >= 0)):
                raise ConfigError(f"must be {'> 0' if positive else '>= 0'} and finite, got {v}", field=f.name)

    def to_array(self) -> np.ndarray:
        """The parameters as a float array in `FIELDS` order (for least-squares fitting)."""
        return np.array([getattr(self, f) for f in self.FIELDS], dtype=float)

    @classmethod
    def from_array(cls, x: Sequence[float]) -> "CostParams":
        """From `FIELDS` order; shorter arrays (older profiles) keep the defaults of the missing
        trailing fields: n_1/2 = 0, decode attention slowdown 1, no mat-vec ALU roof."""
        return cls(*(float(v) for v in x))

    @classmethod
    def from_profile(
        cls_, hw: "HardwareProfile", quant: str | QuantFormat, engine: "EngineConfig | None" = None,
        moe: bool = False,
    ) -> "CostParams":
        """Effective parameters of an engine on a hardware profile (`moe`: for a MoE model, whose
        GEMMs take the class of the engine's expert kernels where it has one, sim.catalog.quant
        `MOE_CLASS_FAMILIES`).

        bandwidth = datasheet bandwidth x eff.bandwidth x scale.bandwidth
        matmul    = peak FLOP/s in the quant's compute format x eff.compute x scale.compute
        attention = peak bf16 FLOP/s x eff.compute x eff.attention x scale.compute x scale.attention
        overheads = profile's (device) + engine's (software), ms -> s

        `eff` is the profile's efficiency for this engine when it has one (a local calibration), else
        for its kernel family (fitted to public measurements, calibrate/public_fit.py), and then the
        engine's `efficiency_scale` multiplies the family's (a preset ships a scale per device group
        fitted to serving rows, calibrate/serving/effscale.py; all presets' default is 1); the engine's own
        measured entry (a local calibration) is not scaled: the measurement already is that engine's.
        A fitted entry's per-weight-class values (`Efficiency.compute_by_class`, `bandwidth_by_class`,
        sim.catalog.quant.kernel_class) win for a
        format of that class, its `attention_of_peak` prices attention against the bf16 peak, and its
        `floor_ms` and `per_sequence_ms` replace the profile's device-side `iteration_overhead_ms` and
        `per_sequence_overhead_ms`. When the profile was
        calibrated on this very engine (`hw.calibration["engine"] == engine.name`) the engine's
        overheads are already in the profile's and are not added again.
        """
        from sim.catalog.quant import get_quant

        q = quant if isinstance(quant, QuantFormat) else get_quant(quant)
        name = engine.name if engine is not None else None
        family = (engine.kernel_family or engine.name) if engine is not None else None
        # a llama.cpp engine's efficiencies are its backend's family's (ggml-vulkan, ggml-rocm on AMD)
        eff = hw.efficiency_for(name, engine.efficiency_family(hw) if engine is not None else None)
        # the engine's own measured entry (a local calibration) already is that engine's: no scale on it; a
        # kernel family's fitted entry (torch, trtllm, ...) is scaled, so a preset's per-device-group
        # `efficiency_scale` (fitted to serving rows, calibrate/serving/effscale.py) corrects it
        own_measurement = name is not None and name in hw.engine_efficiency and eff is hw.engine_efficiency[name]
        calibrated_on_engine = name is not None and (hw.calibration or {}).get("engine") == name
        scale = engine.efficiency_scale if engine is not None and not own_measurement and not calibrated_on_engine \
            else None
        return cls_.from_efficiency(hw, q, eff, family, None if calibrated_on_engine else engine, scale, moe)

    @classmethod
    def from_efficiency(
        cls_, hw: "HardwareProfile", q: QuantFormat, eff: "Efficiency", family: str | None = None,
        engine: "EngineConfig | None" = None, scale=None, moe: bool = False,
    ) -> "CostParams":
        """Effective parameters of efficiencies `eff` on `hw`'s datasheet peaks (the arithmetic of
        `from_profile`, and of the public-measurement fit, calibrate/public_fit.py, which prices
        candidate efficiencies with it): `engine`'s software overheads are added when given, `scale`
        (an EfficiencyScale) multiplies the efficiencies when given."""
        from sim.catalog.quant import is_k_quant, kernel_class

        scale_c, scale_b, scale_a = (scale.compute, scale.bandwidth, scale.attention) if scale is not None \
            else (1.0, 1.0, 1.0)
        it_ms = hw.iteration_overhead_ms if eff.floor_ms is None else eff.floor_ms
        seq_ms = hw.per_sequence_overhead_ms if eff.per_sequence_ms is None else eff.per_sequence_ms
        if engine is not None:
            it_ms += engine.iteration_overhead_ms
            seq_ms += engine.per_sequence_overhead_ms
        # a fitted entry quotes each weight class against its kernels' peak (sim.catalog.quant.kernel_class)
        cls, peak_format = kernel_class(q, family, moe) if eff.compute_by_class else (None, q.compute_format)
        compute_eff = eff.compute_for(cls) * scale_c
        if eff.attention_of_peak is not None:
            attention = hw.peak_flops(ATTENTION_FORMAT) * eff.attention_of_peak * scale_a
        else:
            attention = hw.peak_flops(ATTENTION_FORMAT) * eff.compute * scale_c * eff.attention * scale_a
        return cls_(
            bandwidth_bytes_per_s=hw.bandwidth_bytes_per_s * eff.bandwidth_for(cls) * scale_b,
            matmul_flops_per_s=hw.peak_flops(peak_format) * compute_eff,
            attention_flops_per_s=attention,
            iteration_overhead_s=it_ms / 1e3,
            per_sequence_overhead_s=seq_ms / 1e3,
            # a property of the profile's matmul kernels (calibrated), not of the engine preset
            matmul_half_rows=float(eff.matmul_half_rows if eff.matmul_half_rows is not None
                                   else (getattr(hw, "matmul_half_rows", 0.0) or 0.0)),
            decode_attention_slowdown=float(getattr(hw, "decode_attention_slowdown", 1.0) or 1.0),
            # FLOP-equivalents per K-quant weight at the fp32 ALU rate -> ALU seconds per weight
            matvec_s_per_weight=(eff.kquant_matvec_flops_per_weight / hw.peak_flops("fp32")
                                 if eff.kquant_matvec_flops_per_weight and is_k_quant(q) else 0.0),
        )


