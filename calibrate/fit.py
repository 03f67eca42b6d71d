"""Fit the cost model's seven free parameters to measured iteration times.

The cost model (`sim.cost.roofline.CostModel`) prices one iteration as its weight GEMMs and then
its attention kernels, each group at its own roofline:

    step_s = max(matmul_s, weights_s) + max(attention_s, kv_s)
             + iteration_overhead_s + per_sequence_overhead_s x sequences

(a probe is priced as llama.cpp runs it, one such iteration per pass over the weights: a "mixed"
probe — a prompt chunk decoded together with B sequences, each sequence in its own KV stream — is
the B decodes with the chunk's first token, then the rest of the chunk; see `sim.cost.llamacpp`)

with those four times driven by the effective matmul FLOP/s, attention FLOP/s and memory
bandwidth (`sim.cost.params.CostParams`). Given probe points (iteration shapes with their measured
median seconds) this module finds the `CostParams` that reproduce them, with
`scipy.optimize.least_squares`:

- residuals are *relative* errors, log(predicted) - log(measured), so a 0.1 ms decode step and a
  1 s prefill weigh the same;
- a robust loss (soft-L1 with a 10% scale) keeps a point disturbed by another process on a shared
  machine from dragging the fit;
- rates are fitted in log space within physical bounds (below); overheads are fitted in
  milliseconds, >= 0;
- a seeded fifth of the points per kind (prefill / decode / mixed) is held out of the fit, and
  the error on them is reported together with R² of log time;
- the max()es make the objective piecewise smooth, so the fit starts from several initial points
  and keeps the best.

Physical bounds (from the raw machine probes, `calibrate.machine`):
- bandwidth <= 2 x the STREAM-copy bandwidth: weights that stay in the last-level cache between
  iterations (small models) can stream faster than DRAM, but not arbitrarily;
- matmul <= `int8_speedup` x the fp32 GEMM rate: llama.cpp multiplies quantized weights with int8
  dot products, which on AVX-512 VNNI retire 4 int8 multiply-adds per 32-bit lane where fp32 FMA
  retires 1 (Intel intrinsics guide, VPDPBUSD vs VFMADD231PS), and 2 with AVX2 (VPMADDUBSW);
- attention <= the fp32 GEMM rate: attention multiplies activations with the f16/f32 KV cache,
  which CPU kernels compute with fp32 FMA (no int8 dot products);
- overheads in [0, 100 ms] per iteration and [0, 50 ms] per sequence;
- the multi-row matmul kernels' half-performance length n_1/2 (`CostParams.matmul_half_rows`, the
  GEMM start-up that makes a 2-sequence decode step cost 2.2x a 1-sequence one on llama.cpp CPUs,
  see `sim.cost`) in [0, 32] rows: a start-up worth more rows than twice the largest decode batch
  probed (16) could not be told apart from a lower matmul rate by these probes;
- the decode-attention slowdown (`CostParams.decode_attention_slowdown`, see `sim.cost`) in [1, 32]:
  a decode token's attention (matrix-vector products) cannot run at a higher FLOP rate than a prompt's
  (matrix-matrix products on the same data), and 32x is far beyond the 3-4x measured on CPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from typing import Sequence

import numpy as np
from scipy.optimize import least_squares

from sim.cost.llamacpp import Pass, Piece, split_equal
from sim.cost.params import CostParams
from sim.cost.roofline import CostModel, StepFeatures

ROBUST_SCALE = 0.10  # soft-L1 loss scale on log error: errors beyond ~10% count linearly, not squared
HOLDOUT_FRACTION = 0.2
MAX_ITERATION_OVERHEAD_MS = 100.0
MAX_SEQUENCE_OVERHEAD_MS = 50.0
MAX_HALF_ROWS = 32.0
MAX_DECODE_ATTENTION_SLOWDOWN = 32.0
# Defaults of the parameters newer than the first five (n_1/2, decode-attention slowdown, mat-vec ALU
# seconds per weight): bounds that stop before them, or pin them (upper == lower), keep these values.
# The mat-vec ALU roof (`CostParams.matvec_s_per_weight`) is never fitted here: it is a property of
# llama.cpp's Metal K-quant kernels, fitted to public Apple measurements (calibrate/public_fit.py).
_TRAILING_DEFAULTS = (0.0, 1.0, 0.0)


#: A fit is not saved (calibrate refuses, unless --force) when its held-out median |error| exceeds
#: this: twice the worst held-out prefill target (10%, docs/calibration.md) and above the worst
#: `--quick` run measured there (9.5%). The failed run of issue 41 (a busy machine) had 69%.
MAX_HELDOUT_ERROR = 0.20
#: ... or when more than this many parameters sit on a bound (`params_at_bounds`): one can be the
#: machine's real limit (bandwidth at 2 x STREAM copy when the weights are partly cache-resident);
#: two or more mean the cost model could not describe the timings inside physical limits.
MAX_PARAMS_AT_BOUNDS = 1


@dataclass(frozen=True)
class Observation:
    """One iteration shape with its measured seconds (the fit's unit of data)."""

    id: str
    kind: str  # "prefill" | "decode" | "mixed"
    prefill_tokens: int
    prefill_context: int
    decode_batch: int
    decode_context: float
    measured_s: float


@dataclass(frozen=True)
class FitBounds:
    """Box bounds on `CostParams` (same units, `CostParams.FIELDS` order) and where they came from."""

    lower: tuple[float, ...]
    upper: tuple[float, ...]
    note: str = ""


@dataclass(frozen=True)
class FitResult:
    params: CostParams
    predicted_s: tuple[float, ...]  # for every observation, in input order
    heldout: tuple[bool, ...]
    train_median_abs_error: float
    heldout_median_abs_error: float | None
    heldout_median_abs_error_by_kind: dict[str, float]
    train_median_abs_error_by_kind: dict[str, float]
    r2_log_train: float
    r2_log_heldout: float | None
    r2_log_all: float
    cost: float
    starts: int
    bounds: FitBounds
    notes: list[str] = field(default_factory=list)

    def errors(self, observations: Sequence[Observation]) -> np.ndarray:
        """Signed relative error (predicted / measured - 1) of every observation."""
        meas = np.array([o.measured_s for o in observations])
        return np.asarray(self.predicted_s) / meas - 1.0

    def to_dict(self) -> dict:
        return {
            "params": {f: float(getattr(self.params, f)) for f in CostParams.FIELDS},
            "train_median_abs_error": self.train_median_abs_error,
            "heldout_median_abs_error": self.heldout_median_abs_error,
            "heldout_median_abs_error_by_kind": self.heldout_median_abs_error_by_kind,
            "train_median_abs_error_by_kind": self.train_median_abs_error_by_kind,
            "r2_log_train": self.r2_log_train,
            "r2_log_heldout": self.r2_log_heldout,
            "r2_log_all": self.r2_log_all,
            "n_train": int(len(self.heldout) - sum(self.heldout)),
            "n_heldout": int(sum(self.heldout)),
            "loss": f"soft_l1 on log(predicted/measured), f_scale={ROBUST_SCALE}",
            "bounds": {"lower": list(self.bounds.lower), "upper": list(self.bounds.upper), "note": self.bounds.note},
            "starts": self.starts,
            "notes": list(self.notes),
        }


def physical_bounds(
    raw_bandwidth_bytes_per_s: float | None,
    raw_matmul_flops_per_s: float | None,
    *,
    int8_speedup: float = 1.0,
) -> FitBounds:
    """Bounds from the raw probes (see the module docstring); unbounded above where a rate is unknown
    (an endpoint on a remote machine, or layers offloaded to a GPU the raw probes do not see)."""
    inf = float("inf")
    bw_hi = 2.0 * raw_bandwidth_bytes_per_s if raw_bandwidth_bytes_per_s else inf
    mm_hi = int8_speedup * raw_matmul_flops_per_s if raw_matmul_flops_per_s else inf
    lower = (1e6, 1e6, 1e6, 0.0, 0.0, 0.0, 1.0, 0.0)
    att_hi = raw_matmul_flops_per_s if raw_matmul_flops_per_s else inf
    upper = (bw_hi, mm_hi, att_hi, MAX_ITERATION_OVERHEAD_MS / 1e3, MAX_SEQUENCE_OVERHEAD_MS / 1e3, MAX_HALF_ROWS,
             MAX_DECODE_ATTENTION_SLOWDOWN, 0.0)
    parts = []
    if raw_bandwidth_bytes_per_s:
        parts.append("bandwidth <= 2 x STREAM copy")
    if raw_matmul_flops_per_s:
        parts.append(f"matmul <= {int8_speedup:g} x fp32 GEMM, attention <= fp32 GEMM")
    return FitBounds(lower, upper, "; ".join(parts) or "no raw probes: rates unbounded above")


def int8_speedup_for(simd: Sequence[str]) -> float:
    """How much faster than fp32 FMA llama.cpp's int8 dot products can run with these SIMD features."""
    s = set(simd)
    if {"avx512_vnni", "avx_vnni", "amx_int8"} & s:
        return 4.0
    if {"avx2", "avx512f", "neon", "asimd"} & s:
        return 2.0
    return 1.0


# Tokens one ubatch may hold in the probes' contexts (`calibrate.probes.build_plan`: n_ubatch =
# min(512, n_batch)): a longer prompt probe runs as several passes.
PROBE_N_UBATCH = 512


def observation_passes(o: Observation, n_ubatch: int = PROBE_N_UBATCH) -> list[Pass]:
    """The passes over the weights llama.cpp runs for one probe's batch (`sim.cost.llamacpp.split_equal`).

    The probe worker puts B decodes in sequences 0..B-1 (one token each, with logits) and then the
    prompt chunk in sequence B (logits for its last token), every sequence in its own KV stream.
    So a mixed probe's first pass holds the B decodes *and* the chunk's first token (consecutive
    seq_ids), the second pass the chunk's other tokens; a prompt longer than n_ubatch is several
    passes; a decode probe is one."""
    pieces = [Piece(s, 1, o.decode_context) for s in range(o.decode_batch)]
    if o.prefill_tokens:
        pieces.append(Piece(o.decode_batch, o.prefill_tokens, o.prefill_context))
    return split_equal(pieces, n_ubatch)


def pass_features(cost: CostModel, observations: Sequence[Observation]) -> tuple[StepFeatures, ...]:
    """The passes each observation's batch takes (`observation_passes`), as one StepFeatures per
    pass index with one row per observation (an empty row — zero tokens, priced 0 — past an
    observation's last pass)."""
    empty = cost.features((), (), ())
    passes = [observation_passes(o) for o in observations]
    depth = max((len(p) for p in passes), default=1)
    return tuple(StepFeatures.concat([cost.pass_features(p[i]) if i < len(p) else empty for p in passes])
                 for i in range(depth))


def predict_observations(cost: CostModel, params: CostParams | Sequence[float],
                         observations: Sequence[Observation]) -> np.ndarray:
    """Predicted seconds of every observation under `params` (the sum of its passes)."""
    return sum(cost.predict_times(params, f) for f in pass_features(cost, observations))


def _select(feats: StepFeatures, mask: np.ndarray) -> StepFeatures:
    """The rows of `feats` where `mask` is true (whatever aggregate fields StepFeatures carries)."""
    return StepFeatures(*(np.asarray(getattr(feats, f.name))[mask] for f in dataclass_fields(StepFeatures)))


def holdout_mask(observations: Sequence[Observation], *, seed: int = 0, fraction: float = HOLDOUT_FRACTION) -> np.ndarray:
    """A seeded choice of about `fraction` of the points of each kind (at least one of a kind with
    three or more points), so prefill and decode are both tested on points the fit never saw."""
    rng = np.random.default_rng(seed)
    mask = np.zeros(len(observations), dtype=bool)
    kinds = sorted({o.kind for o in observations})
    for kind in kinds:
        idx = np.array([i for i, o in enumerate(observations) if o.kind == kind])
        if len(idx) < 3:
            continue
        k = max(1, int(round(fraction * len(idx))))
        mask[rng.choice(idx, size=k, replace=False)] = True
    return mask


def _r2_log(measured: np.ndarray, predicted: np.ndarray) -> float:
    """Coefficient of determination of log time: 1 - SS_res / SS_tot (1 = perfect)."""
    y, f = np.log(measured), np.log(predicted)
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    ss_res = float(np.sum((y - f) ** 2))
    return 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan")


def _median_abs(errors: np.ndarray) -> float | None:
    return float(np.median(np.abs(errors))) if len(errors) else None


def fit_cost_params(
    cost: CostModel,
    observations: Sequence[Observation],
    bounds: FitBounds,
    *,
    seed: int = 0,
    holdout: np.ndarray | None = None,
) -> FitResult:
    """Least-squares fit of `CostParams` to the observations not held out; errors on all of them."""
    obs = list(observations)
    if len(obs) < 6:
        raise ValueError(f"need at least 6 probe points to fit the cost parameters, got {len(obs)}")
    measured = np.array([o.measured_s for o in obs], dtype=float)
    if not np.all(measured > 0):
        raise ValueError("every measured time must be > 0")
    passes = pass_features(cost, obs)
    mask = holdout_mask(obs, seed=seed) if holdout is None else np.asarray(holdout, dtype=bool)
    train = ~mask
    f_train = [_select(f, train) for f in passes]
    y_train = np.log(measured[train])

    # Bounds that stop before n_1/2 or the decode-attention slowdown (older callers), or pin one
    # (upper == lower), keep it at its default (0 rows: plain roofline; 1: one attention rate).
    def padded(b: tuple[float, ...]) -> np.ndarray:
        return np.array((*b, *_TRAILING_DEFAULTS[max(0, len(b) - 5):])[:len(CostParams.FIELDS)], dtype=float)

    lo, hi = padded(bounds.lower), padded(bounds.upper)
    fit_half = hi[5] > lo[5]
    fit_slow = hi[6] > lo[6]

    # Decision vector: log of the three rates, the two overheads in milliseconds (well scaled), then
    # n_1/2 in rows and the log of the decode-attention slowdown where they are fitted.
    i_half = 5 if fit_half else None
    i_slow = (6 if fit_half else 5) if fit_slow else None

    def to_params(x: np.ndarray) -> np.ndarray:
        half = x[i_half] if i_half is not None else lo[5]
        slow = np.exp(x[i_slow]) if i_slow is not None else lo[6]
        return np.array([np.exp(x[0]), np.exp(x[1]), np.exp(x[2]), x[3] / 1e3, x[4] / 1e3, half, slow, lo[7]])

    x_lo = np.array([np.log(lo[0]), np.log(lo[1]), np.log(lo[2]), lo[3] * 1e3, lo[4] * 1e3])
    x_hi = np.array([
        np.log(hi[0]) if np.isfinite(hi[0]) else np.inf,
        np.log(hi[1]) if np.isfinite(hi[1]) else np.inf,
        np.log(hi[2]) if np.isfinite(hi[2]) else np.inf,
        hi[3] * 1e3, hi[4] * 1e3,
    ])
    if fit_half:
        x_lo, x_hi = np.append(x_lo, lo[5]), np.append(x_hi, hi[5])
    if fit_slow:
        x_lo, x_hi = np.append(x_lo, np.log(lo[6])), np.append(x_hi, np.log(hi[6]))

    def residuals(x: np.ndarray) -> np.ndarray:
        p = to_params(x)
        pred = sum(cost.predict_times(p, f) for f in f_train)
        return np.log(np.maximum(pred, 1e-12)) - y_train

    # Starting points: a coarse grid over rates relative to the upper bounds (or generic magnitudes
    # when unbounded) and overheads of a fraction of the fastest point, so every regime of the
    # roofline (memory-bound, compute-bound, overhead-bound) gets a start.
    def ref(i: int, generic: float) -> float:
        return hi[i] if np.isfinite(hi[i]) else generic

    t_min_ms = float(measured.min()) * 1e3
    starts = []
    for rate_share in (0.5, 0.1, 0.02):
        for att_share in (1.0, 0.2):
            for oh_share in (0.05, 0.4):
                for half in ((0.0, 4.0) if fit_half else (None,)):
                    x0 = np.array([
                        np.log(ref(0, 1e11) * rate_share), np.log(ref(1, 1e12) * rate_share),
                        np.log(ref(2, 1e12) * rate_share * att_share),
                        min(t_min_ms * oh_share, x_hi[3]), min(t_min_ms * oh_share * 0.5, x_hi[4]),
                        *(() if half is None else (min(half, hi[5]),)),
                        *((np.log(min(2.0, hi[6])),) if fit_slow else ()),
                    ])
                    starts.append(np.clip(x0, x_lo + 1e-9, np.where(np.isfinite(x_hi), x_hi - 1e-9, x0)))
    best = None
    for x0 in starts:
        res = least_squares(residuals, x0, bounds=(x_lo, x_hi), loss="soft_l1", f_scale=ROBUST_SCALE,
                            x_scale="jac", max_nfev=2000)
        if best is None or res.cost < best.cost:
            best = res
    assert best is not None
    p = to_params(best.x)
    params = CostParams.from_array(p)
    pred_all = sum(cost.predict_times(params, f) for f in passes)
    err = pred_all / measured - 1.0
    kinds = sorted({o.kind for o in obs})

    def by_kind(sel: np.ndarray) -> dict[str, float]:
        out = {}
        for k in kinds:
            m = sel & np.array([o.kind == k for o in obs])
            if m.any():
                out[k] = float(np.median(np.abs(err[m])))
        return out

    notes = []
    names = [*CostParams.FIELDS[:5], *(["matmul_half_rows"] if fit_half else []),
             *(["decode_attention_slowdown"] if fit_slow else [])]
    for i, name in enumerate(names):
        if np.isfinite(x_hi[i]) and abs(best.x[i] - x_hi[i]) < 1e-6 * max(1.0, abs(x_hi[i])):
            notes.append(f"{name} reached its upper bound")
    return FitResult(
        params=params,
        predicted_s=tuple(float(v) for v in pred_all),
        heldout=tuple(bool(v) for v in mask),
        train_median_abs_error=float(np.median(np.abs(err[train]))),
        heldout_median_abs_error=_median_abs(err[mask]),
        heldout_median_abs_error_by_kind=by_kind(mask),
        train_median_abs_error_by_kind=by_kind(train),
        r2_log_train=_r2_log(measured[train], pred_all[train]),
        r2_log_heldout=_r2_log(measured[mask], pred_all[mask]) if mask.sum() >= 2 else None,
        r2_log_all=_r2_log(measured, pred_all),
        cost=float(best.cost),
        starts=len(starts),
        bounds=bounds,
        notes=notes,
    )


def params_at_bounds(fit: FitResult, rel: float = 1e-4) -> list[str]:
    """The fitted parameters that sit on a bound that no real machine explains: any parameter at its
    upper bound, and a rate (bandwidth, matmul, attention) at its lower bound (1e6 per second). An
    overhead of 0, an n_1/2 of 0 rows (plain roofline) or a decode-attention slowdown of 1 are
    natural values, not fitting failures."""
    lower, upper = fit.bounds.lower, fit.bounds.upper
    out = []
    for i, name in enumerate(CostParams.FIELDS):
        if i >= len(upper) or i >= len(lower) or upper[i] <= lower[i]:  # pinned or not fitted
            continue
        x = float(getattr(fit.params, name))
        if np.isfinite(upper[i]) and abs(x - upper[i]) <= rel * max(abs(upper[i]), 1e-12):
            out.append(f"{name} at its upper bound ({upper[i]:.4g})")
        elif i < 3 and abs(x - lower[i]) <= rel * max(abs(lower[i]), 1e-12):
            out.append(f"{name} at its lower bound ({lower[i]:.4g})")
    return out


def unreliable_reasons(fit: FitResult) -> list[str]:
    """Why a fit must not be saved as a profile (empty: it may). Held-out median |error| above
    `MAX_HELDOUT_ERROR` (the training error when nothing was held out), or more than
    `MAX_PARAMS_AT_BOUNDS` parameters on a bound (`params_at_bounds`)."""
    reasons = []
    err, what = fit.heldout_median_abs_error, "held-out"
    if err is None:
        err, what = fit.train_median_abs_error, "fit (nothing held out)"
    if err is not None and err > MAX_HELDOUT_ERROR:
        reasons.append(f"{what} median error {err:.0%} > {MAX_HELDOUT_ERROR:.0%}")
    bound = params_at_bounds(fit)
    if len(bound) > MAX_PARAMS_AT_BOUNDS:
        reasons.append(f"{len(bound)} parameters at their bounds ({'; '.join(bound)})")
    return reasons
