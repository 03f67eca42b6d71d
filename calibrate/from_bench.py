"""`infersim calibrate --from-bench FILE...`: a profile fitted to the serving benchmarks you already ran.

Each result file (`vllm bench serve` JSON, AIPerf / genai-perf export, GuideLLM benchmarks.json;
sim.bench.results) is a set of load points: the load the client sent and what it measured. The
fit replays every point on the simulator (sim.bench.results.predict: the tool's own load pattern
and metric definitions) and moves four cost-model parameters (sim.cost.params.CostParams) until
the replayed figures match the measured ones, and a fifth, the engine's per-request front end:

- `bandwidth`: the memory bandwidth the engine's kernels reach, as a multiple s_b of what the
  --hw profile gives this engine (datasheet bandwidth x its efficiency): decode steps stream the
  weights and the KV cache at this rate;
- `compute`: the matmul FLOP/s, likewise a multiple s_c; attention FLOP/s moves with it (one
  factor: prompt processing is the only thing serving figures show of either, and their ratio
  stays the profile's);
- `floor_ms`: the fixed cost of one engine iteration (kernel launches, scheduling, sampling of
  the batch), the device's and the engine's together;
- `per_sequence_ms`: the cost per sequence per iteration (detokenisation, streaming, sampling);
- `request_overhead_ms`: the per-request front-end latency outside the GPU steps
  (`EngineConfig.request_overhead_ms`, workloads.arrivals.FrontEnd: HTTP, chat template, tokenization,
  streaming the first token), one constant added to every request's TTFT and end-to-end latency and
  not to TPOT. Without it the fit had to put a TTFT offset into a slower prefill (compute) and a
  longer floor, which then mispredict throughput; and the offset is a deployment's own (client, HTTP
  stack, tokenizer, streaming: docs/ttft-misses.md found most of the held-out TTFT p50 error of the
  public serving curves to be such an offset, present already at the lowest load), so only the
  user's own runs can fit it. It starts at the engine preset's value (the serving corpus's
  per-release fit: vLLM 0.11 15 ms, SGLang 0.5 75 ms) and is bounded to 0-500 ms (MAX_REQUEST_MS:
  the presets' largest is 75 ms and the serving fit's grid stops at 300 ms; a second or more is a
  queue, not a front end). It is fitted only when the fitted points' prompts span a factor of two or
  more in mean length (PROMPT_SPREAD): a low-load TTFT is front end + prefill(prompt), the prefill
  growing with the prompt at the compute rate, so one prompt length fixes only their sum and the fit
  trades one for the other (benchmarks/from_bench_public.py: on eight public curves of one prompt
  length each, fitted on their two lowest loads, the front end fitted alongside made the held-out TTFT
  p50 error worse on five (see its docstring); a short and a long prompt at C=1 separate them,
  tests/test_calibrate_from_bench.py). Otherwise, with `fit_front_end=False`, or when the deployment's
  overrides or engine file name the field (the user's value wins at run time, so the fit keeps it), it
  stays at the engine's value, the fit of four, and `notes` says why.

Residuals are log(predicted / measured) of TTFT (mean, median), TPOT (mean, median; AIPerf's and
GuideLLM's inter-token latency per request is vLLM's TPOT), vLLM's ITL mean and the output
throughput, each where the file has it, so a 10 ms TPOT and a 2,000 tok/s throughput weigh alike.
`scipy.optimize.least_squares` (trust-region reflective, soft-L1 loss with a 5 % scale: one odd
point cannot drag the fit) within physical bounds: s_b and s_c from 0.05 to the value that makes
the efficiency 1 (never above the datasheet), floor 0-50 ms, per sequence 0-5 ms, front end 0-500 ms.

An open-loop point (requests sent at a rate: GuideLLM constant / Poisson, `--request-rate`) is
jagged in the parameters: each request waits for the rest of the iteration under way when it
arrives, so a parameter that moves iteration ends across an arrival moves that request's TTFT by
up to one iteration (and the batch it joins): the mean of 32 requests jumps by up to ~2 % between
parameter moves of 0.3 %. Closed loops (a max concurrency, requests sent as others end) are smooth.
Along the valley where a faster bandwidth trades for a longer floor (both lengthen every step
alike; only the KV-cache term, batch x context / bandwidth, tells them apart) the jumps hold the
optimizer in local minima: synthetic files written at known parameters, closed loops at C=1-64
plus a GuideLLM constant-rate run, came back with the floor 9.9 % and the per-sequence cost 169 %
off in one pass (tests/test_calibrate_from_bench.py). So the fit runs twice when the training
points have both kinds: the closed loops alone first (they find the basin), then every point from
there; on those files the two passes give every parameter back to 1e-4.

The finite-difference step (FD_STEP, scipy's rule: diff_step x max(1, |x|)) is 5 %: 0.05 in log
s_b and log s_c (5 % of the rate), 5 % of the floor (at least 0.05 ms), 0.05 ms per sequence, 5 %
of the front end (at least 0.05 ms). A
1 % step measures the jumps above rather than the slope beneath them: in one pass (before the two
passes) over a variant of those files, at three hold-out seeds, it left the floor 13-37 % off, a
5 % step 1.5-4 %; the second pass moves only where real files leave residuals.

A seeded quarter of the files (of the points when there are fewer than three files; at least one
from three) is held out of the fit and its error reported; the profile written is a copy of --hw with
this engine's efficiency entry (`engine_efficiency.<engine>`) replaced by the fitted values and
`calibration` saying which files, points and residuals it came from. The front end goes in the same
entry (`Efficiency.request_overhead_ms`), which sim.catalog.deployment.engine_for lays over the
preset's for this engine only, so `--hw <profile> --engine <engine>` runs it (an --engine-file or
override still wins; a profile without it runs the preset's, as before). `CostParams.from_profile`
of the written profile gives back the four cost parameters exactly, and the engine resolved on it
the fitted front end (both checked before writing).
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from sim.bench.results import METRICS, MeasuredPoint, predict, read_results
from sim.bench.serve import Deployment
from sim.errors import ConfigError

FIT_METRICS = ("ttft_mean_ms", "ttft_median_ms", "tpot_mean_ms", "tpot_median_ms", "itl_mean_ms", "output_tps")
HOLDOUT_FRACTION = 0.25
ROBUST_SCALE = 0.05
MAX_FLOOR_MS = 50.0
MAX_PER_SEQUENCE_MS = 5.0
MAX_REQUEST_MS = 500.0
PROMPT_SPREAD = 2.0  # the front end is fitted when the fitted points' mean prompt lengths span this factor
FRONT_END = "request_overhead_ms"
MIN_SCALE = 0.05
FD_STEP = 0.05


@dataclass
class BenchFit:
    """What `fit_from_bench` found."""

    params: object  # CostParams
    scale_bandwidth: float
    scale_compute: float
    floor_ms: float
    per_sequence_ms: float
    request_overhead_ms: float  # the front end the fit ran: fitted, or the engine's (front_end_fitted False)
    front_end_fitted: bool
    points: list[MeasuredPoint]
    heldout: list[bool]
    rows: list[dict]  # per point and metric: measured, predicted, error %, held out
    train_median_abs_error_pct: float | None
    heldout_median_abs_error_pct: float | None
    evaluations: int
    notes: list[str] = field(default_factory=list)

    def summary(self) -> dict:
        return {"scale_bandwidth": self.scale_bandwidth, "scale_compute": self.scale_compute,
                "floor_ms": self.floor_ms, "per_sequence_ms": self.per_sequence_ms,
                "request_overhead_ms": self.request_overhead_ms, "front_end_fitted": self.front_end_fitted,
                "train_median_abs_error_pct": self.train_median_abs_error_pct,
                "heldout_median_abs_error_pct": self.heldout_median_abs_error_pct,
                "points": len(self.points), "heldout_points": int(sum(self.heldout)),
                "evaluations": self.evaluations, "notes": self.notes}


def _base(deployment: Deployment):
    """The --hw profile, engine, model, quantization and the cost parameters they give (the fit's start)."""
    from sim.api import resolve
    from sim.catalog import cache
    from sim.cost.params import CostParams

    spec = deployment.spec("<from-bench>")
    hw, engine = resolve(spec)
    model = cache.model(spec.model).as_loaded_by(engine.kernel_family)
    q = model.quant(spec.quant or engine.default_quant)
    return hw, engine, model, q, CostParams.from_profile(hw, q, engine, model.is_moe)


def holdout(n: int, *, seed: int = 0, fraction: float = HOLDOUT_FRACTION) -> list[bool]:
    """A seeded choice of n groups kept out of the fit: round(fraction x n), at least one from 3."""
    if n < 3 or fraction <= 0:
        return [False] * n
    k = min(n - 2, max(1, round(fraction * n)))
    pick = set(np.random.default_rng(seed).choice(n, size=k, replace=False).tolist())
    return [i in pick for i in range(n)]


def holdout_points(points: list[MeasuredPoint], *, seed: int = 0,
                   fraction: float = HOLDOUT_FRACTION) -> tuple[list[bool], str]:
    """Which points the fit leaves out, and how they were chosen: whole files when there are three
    or more (the points of one file share a server, a day and a client: holding out some of them
    while fitting the others says little), else single points."""
    files = sorted({p.file for p in points})
    if len(files) >= 3:
        out = holdout(len(files), seed=seed, fraction=fraction)
        held = {f for f, h in zip(files, out) if h}
        return [p.file in held for p in points], "file"
    return holdout(len(points), seed=seed, fraction=fraction), "point"


def open_loop(point: MeasuredPoint) -> bool:
    """Requests sent at times of the client's own (a rate), not when one ends: then each waits for
    the rest of the iteration it arrives in, and its TTFT is jagged in the cost parameters."""
    return bool(np.ptp(point.workload.release_s) > 0) if len(point.workload.release_s) else False


def _params(base, x: np.ndarray):
    from sim.cost.params import CostParams

    s_b, s_c = math.exp(x[0]), math.exp(x[1])
    return CostParams(
        bandwidth_bytes_per_s=base.bandwidth_bytes_per_s * s_b, matmul_flops_per_s=base.matmul_flops_per_s * s_c,
        attention_flops_per_s=base.attention_flops_per_s * s_c, iteration_overhead_s=x[2] / 1e3,
        per_sequence_overhead_s=x[3] / 1e3, matmul_half_rows=base.matmul_half_rows,
        decode_attention_slowdown=base.decode_attention_slowdown, matvec_s_per_weight=base.matvec_s_per_weight)


def _front_end_set(deployment: Deployment) -> bool:
    """The deployment's overrides or engine file name the front end: the user's value, kept by the fit."""
    from sim.catalog.engine_config import read_yaml

    if FRONT_END in deployment.overrides:
        return True
    return bool(deployment.engine_file) and FRONT_END in (read_yaml(Path(deployment.engine_file)) or {})


def fit_from_bench(points: list[MeasuredPoint], deployment: Deployment, *, seed: int = 0,
                   holdout_fraction: float = HOLDOUT_FRACTION, metrics=FIT_METRICS,
                   fit_front_end: bool = True) -> BenchFit:
    """Fit bandwidth, compute, per-iteration and per-sequence overheads and (`fit_front_end`) the
    per-request front end to the points (see the module docstring)."""
    from scipy.optimize import least_squares

    hw, engine, model, q, base = _base(deployment)
    front0 = engine.request_overhead_ms
    notes = []
    used = [[m for m in metrics if m in p.measured and p.measured[m] > 0] for p in points]
    if not any(used):
        raise ConfigError(f"no usable figure ({', '.join(metrics)}) in the result files", field="--from-bench")
    held, basis = holdout_points(points, seed=seed, fraction=holdout_fraction)
    train = [i for i in range(len(points)) if not held[i] and used[i]]
    if not train:
        raise ConfigError("every point was held out: give more result files or points", field="--from-bench")
    if fit_front_end and _front_end_set(deployment):
        fit_front_end = False
        notes.append(f"front end kept at {front0:g} ms: the engine file or overrides set {FRONT_END}")
    means = [float(np.mean(points[i].workload.prompt_lens)) for i in train if len(points[i].workload.prompt_lens)]
    if fit_front_end and (not means or max(means) < PROMPT_SPREAD * min(means)):
        fit_front_end = False
        notes.append(f"front end kept at {front0:g} ms (the engine's): the fitted points' prompts are of one length "
                     f"(mean {min(means or [0]):.0f}-{max(means or [0]):.0f} tokens), which cannot tell it from the "
                     f"prefill; add a run at C=1 with prompts {PROMPT_SPREAD:g}x longer or shorter to fit it")
    peak_bw = hw.bandwidth_bytes_per_s
    peak_c = hw.peak_flops(q.compute_format)
    hi_b = math.log(peak_bw / base.bandwidth_bytes_per_s)
    hi_c = math.log(min(peak_c / base.matmul_flops_per_s,
                        hw.peak_flops("bf16") / base.attention_flops_per_s))
    n = 5 if fit_front_end else 4  # x: log s_b, log s_c, floor ms, per-sequence ms[, front end ms]
    lo = np.array([math.log(MIN_SCALE), math.log(MIN_SCALE), 0.0, 0.0, 0.0])[:n]
    hi = np.array([max(hi_b, lo[0] + 1e-6), max(hi_c, lo[1] + 1e-6), MAX_FLOOR_MS, MAX_PER_SEQUENCE_MS,
                   MAX_REQUEST_MS])[:n]
    x0 = np.clip(np.array([0.0, 0.0, base.iteration_overhead_s * 1e3, base.per_sequence_overhead_s * 1e3,
                           front0])[:n], lo, hi - 1e-9)
    x0[2] = max(x0[2], 0.05)  # a zero start would make the relative step zero
    x0[3] = max(x0[3], 0.005)
    # the trust region's units: 10 % of a rate, the floor, 0.05 ms per sequence, 1 ms of front end (what a 10 %
    # rate change moves a short prompt's TTFT by; at 15 ms, the preset's value, the synthetic files' fit stopped
    # with the front end 11 % and the per-sequence cost 374 % off: tests/test_calibrate_from_bench.py)
    x_scale = np.array([0.1, 0.1, max(x0[2], 0.5), max(x0[3], 0.05), 1.0])[:n]

    def front(x: np.ndarray) -> float:
        return float(x[4]) if fit_front_end else front0
    evals = [0]
    cache: dict[tuple, list[dict]] = {}

    def predictions(x: np.ndarray, idx: list[int]) -> list[dict]:
        key = (tuple(np.round(x, 12)), tuple(idx))
        if key not in cache:
            evals[0] += 1
            dep = replace(deployment, cost_params=_params(base, x),
                          overrides={**deployment.overrides, FRONT_END: front(x)})
            cache[key] = [predict(points[i], dep) for i in idx]
        return cache[key]

    def residuals(x: np.ndarray, skip=frozenset()) -> np.ndarray:
        out = []
        for i, pred in zip(train, predictions(x, train)):
            for m in used[i]:
                if (i, m) in skip:
                    continue
                v = pred.get(m)
                out.append(math.log(v / points[i].measured[m]) if v and v > 0 else 5.0)
        return np.array(out)

    def solve(start: np.ndarray, skip=frozenset()) -> np.ndarray:
        return least_squares(residuals, start, bounds=(lo, hi), loss="soft_l1", f_scale=ROBUST_SCALE,
                             diff_step=FD_STEP, x_scale=x_scale,
                             max_nfev=200, kwargs={"skip": skip}).x

    # an open-loop point's figures are jagged in the parameters (module docstring): first the closed loops
    # alone find the basin, then every figure from there
    jagged = frozenset((i, m) for i in train if open_loop(points[i]) for m in used[i])
    x = x0
    if jagged and sum(len(used[i]) for i in train) - len(jagged) >= len(x0):
        x = solve(x0, jagged)
    x = solve(x)
    all_idx = list(range(len(points)))
    preds = predictions(x, all_idx)
    rows, train_err, held_err = [], [], []
    for i, (p, pred) in enumerate(zip(points, preds)):
        for m in METRICS:
            if m in p.measured and p.measured[m]:
                v = pred.get(m)
                err = None if v is None else (v / p.measured[m] - 1) * 100
                rows.append({"file": p.file, "point": p.label, "metric": m, "measured": p.measured[m],
                             "predicted": v, "error_pct": err, "heldout": held[i], "fitted": m in used[i]})
                if err is not None and m in used[i]:
                    (held_err if held[i] else train_err).append(abs(err))
    if not any(held):
        notes.append(f"{len(points)} point(s): too few to hold any out (3 or more needed); the error shown is in-sample")
    else:
        notes.append(f"held out by {basis}: {sum(held)} of {len(points)} point(s)")
    return BenchFit(_params(base, x), math.exp(x[0]), math.exp(x[1]), float(x[2]), float(x[3]), front(x),
                    fit_front_end, points, held, rows,
                    float(np.median(train_err)) if train_err else None,
                    float(np.median(held_err)) if held_err else None, evals[0], notes)


def fitted_profile(fit: BenchFit, deployment: Deployment, *, name: str, files: list[str]):
    """A copy of the --hw profile whose efficiency entry for this engine gives back the fitted
    parameters (`CostParams.from_profile`), with the provenance in `calibration`."""
    from sim.catalog.hardware import Efficiency, HardwareProfile
    from sim.files import file_sha256

    hw, engine, model, q, base = _base(deployment)
    p = fit.params
    family = engine.kernel_family or engine.name
    donor = hw.efficiency_for(engine.name, family)
    date = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
    eff = Efficiency(**{
        **donor.model_dump(),
        "compute": p.matmul_flops_per_s / hw.peak_flops(q.compute_format),
        "bandwidth": p.bandwidth_bytes_per_s / hw.bandwidth_bytes_per_s,
        "attention_of_peak": p.attention_flops_per_s / hw.peak_flops("bf16"),
        "compute_by_class": {}, "bandwidth_by_class": {},
        "floor_ms": p.iteration_overhead_s * 1e3, "per_sequence_ms": p.per_sequence_overhead_s * 1e3,
        "matmul_half_rows": p.matmul_half_rows,
        # the fitted front end, laid over this engine's preset by sim.catalog.deployment.engine_for; a kept one
        # (the user's own value) stays the base profile's
        FRONT_END: fit.request_overhead_ms if fit.front_end_fitted else donor.request_overhead_ms,
        "source": f"infersim calibrate --from-bench {date}: fitted to {len(fit.points)} load point(s) of "
                  f"{', '.join(Path(f).name for f in files)} ({engine.name}, {model.name}, {q.name})",
        "corpus_rows": [], "transferred_from": [], "error": {}, "current_build_share": None, "rows_timed_here": 0,
    })
    data = hw.model_dump()
    data["name"] = name
    data["display_name"] = f"{hw.display_name} (calibrated from benchmarks)"
    data["engine_efficiency"] = {**{k: v for k, v in data.get("engine_efficiency", {}).items()}, engine.name: eff}
    data["calibration"] = {
        "method": "from-bench", "engine": engine.name, "date": date, "base_profile": hw.name,
        "model": model.name, "quant": q.name,
        "files": [{"path": str(f), "sha256": file_sha256(f)} for f in files],
        "fit": fit.summary(),
        "points": [{k: r[k] for k in ("file", "point", "metric", "measured", "predicted", "error_pct", "heldout",
                                      "fitted")} for r in fit.rows],
    }
    prof = HardwareProfile(**data)
    _check(prof, p, q, engine, model)
    if fit.front_end_fitted:
        _check_front_end(prof, fit.request_overhead_ms, deployment)
    return prof


def _check(prof, params, q, engine, model) -> None:
    """`CostParams.from_profile` of the written profile equals the fit (calibrate.profile's
    check_reproduces, for a resolved engine and a MoE model)."""
    from sim.cost.params import CostParams

    back = CostParams.from_profile(prof, q, engine, model.is_moe)
    for f in CostParams.FIELDS:
        a, b = getattr(back, f), getattr(params, f)
        if not math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12):
            raise AssertionError(f"calibrated profile does not reproduce {f}: {a} != {b}")


def _check_front_end(prof, fitted_ms: float, deployment: Deployment) -> None:
    """The engine every command resolves on the written profile (sim.api.resolve_engine, the deployment's
    names, engine file and overrides) runs the fitted front end."""
    from sim.api import resolve_engine

    back = resolve_engine(deployment.spec("<from-bench>"), prof).request_overhead_ms
    if not math.isclose(back, fitted_ms, rel_tol=1e-9, abs_tol=1e-9):
        raise AssertionError(f"calibrated profile does not reproduce {FRONT_END}: {back} != {fitted_ms}")


def calibrate_from_bench(files: list[str], deployment: Deployment, *, name: str, out: Path | None = None,
                         seed: int = 0, holdout_fraction: float = HOLDOUT_FRACTION, write: bool = True):
    """Read, fit, build the profile and write it (to `out`, else the user profile folder)."""
    from calibrate.calibration import default_profile_path
    from calibrate.profile import write_profile_atomic

    points = [p for f in files for p in read_results(f)]
    fit = fit_from_bench(points, deployment, seed=seed, holdout_fraction=holdout_fraction)
    prof = fitted_profile(fit, deployment, name=name, files=files)
    path = None
    if write:
        path = write_profile_atomic(prof, out or default_profile_path(name))
    return fit, prof, path
