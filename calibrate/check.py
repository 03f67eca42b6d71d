"""Does a calibrated profile still describe this machine? Re-time a few probe shapes and compare.

A calibration is a measurement of the machine as it was for a few minutes. On a shared or virtual
machine that changes: another tenant on the sibling hyperthread slows compute-bound steps (prompts,
batched decode) while leaving memory-bound ones (one-sequence decode) almost untouched; the
hypervisor steals time; a laptop throttles. Neither the cost model nor a replay can tell those apart
from a model error, so this module measures them directly: it times a handful of iteration shapes
with the same child-process probes as `calibrate.probes` (a 256-token prompt; one-, 4- and
8-sequence decode steps) in the calibration's own llama.cpp contexts, and sets each against the
calibration's measurement of the same shape ("drift"; against the profile's prediction where the
calibration did not time that shape) and against the prediction the simulator would use.
`benchmarks/fidelity.py` runs it around every case; `infersim calibrate --check PROFILE` runs it for
a user.

The verdict (`ProfileCheck.matches`) is the median shape's drift within `DRIFT_TOLERANCE`, 8 %:
below the 10 % latency targets, and above the repeatability of the check itself (five checks back to
back on this VM, against the profile's predictions, had median shapes between -4.9 % and +4.0 %).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from calibrate.fit import Observation, predict_observations
from calibrate.probes import probe_spec, run_plan

DRIFT_TOLERANCE = 0.08

# (batch, context) of the decode shapes, and the prompt length: the three regimes the cost model
# separates on a CPU (a GEMV at one sequence, tiled GEMMs from two on, a prompt's matrix-matrix work)
CHECK_DECODES = ((1, 64), (4, 64), (8, 64))
CHECK_PREFILL = 256


def check_plan(model_path: str | Path, *, n_threads: int, n_gpu_layers: int = 0, seed: int = 0,
               contexts: list[dict] | None = None) -> dict:
    """The probe plan of a check: about 10-15 s with a small model.

    `contexts` are the llama.cpp contexts a calibration recorded (profile.calibration["contexts"]):
    the check opens the same ones (sizes, sequences, one KV stream per sequence), so its steps are
    the calibration's steps; without them, contexts just large enough."""
    reps = {"warmup": 1, "runs": 3, "max_runs": 9, "min_time_s": 0.5}
    dreps = {"warmup": 2, "runs": 8, "max_runs": 48, "min_time_s": 0.5}
    n_seq = max(b for b, _ in CHECK_DECODES)
    recorded = {c.get("session"): c for c in contexts or []}
    sessions = {
        "single": {"n_ctx": 512, "n_batch": 512, "n_seq_max": 1},
        "batched": {"n_ctx": n_seq * 256, "n_batch": 512, "n_seq_max": n_seq},
    }
    for name, session in sessions.items():
        c = recorded.get(name)
        if c and c.get("n_seq_max", 0) >= session["n_seq_max"] and not c.get("kv_unified"):
            session.update(n_ctx=int(c["n_ctx"]), n_batch=int(c["n_batch"]), n_seq_max=int(c["n_seq_max"]))
    probes = {
        "single": [probe_spec(f"prefill-{CHECK_PREFILL}", "prefill", p=CHECK_PREFILL, **reps)],
        "batched": [probe_spec(f"decode-{b}@{c}", "decode", b=b, cd=c, **dreps) for b, c in CHECK_DECODES],
    }
    return {
        "model_path": str(Path(model_path).resolve()), "n_threads": int(n_threads),
        "n_gpu_layers": int(n_gpu_layers), "seed": int(seed), "warm_loads": 0,
        "sessions": [{"name": name, **s, "n_ubatch": min(512, s["n_batch"]), "kv_unified": False,
                      "probes": probes[name]} for name, s in sessions.items()],
    }


@dataclass(frozen=True)
class CheckPoint:
    id: str
    measured_s: float  # the step now
    predicted_s: float  # what the profile's cost model says (what a simulation uses)
    calibrated_s: float | None = None  # the same shape as the calibration measured it, when it did

    @property
    def drift(self) -> float:
        """How much slower (+) or faster (-) the machine runs this shape now than when it was
        calibrated: against the calibration's own measurement of the shape when the profile recorded
        one (machine change alone), else against the prediction (machine change plus fit residual)."""
        return self.measured_s / (self.calibrated_s or self.predicted_s) - 1.0

    @property
    def profile_error(self) -> float:
        """The profile's prediction against the step now: (predicted - measured) / measured."""
        return self.predicted_s / self.measured_s - 1.0


@dataclass(frozen=True)
class ProfileCheck:
    points: tuple[CheckPoint, ...]
    steal_share: float | None  # CPU time the hypervisor took from this VM while the check ran
    wall_s: float
    tolerance: float = DRIFT_TOLERANCE

    @property
    def max_abs_drift(self) -> float:
        return max(abs(p.drift) for p in self.points)

    @property
    def median_drift(self) -> float:
        return statistics.median(p.drift for p in self.points)

    @property
    def matches(self) -> bool:
        """True when the median shape ran within `tolerance` of the calibration.

        The median, not every shape: the calibration's own measurement of a shape carries its noise
        (a point's runs can spread 10-30 % on a busy VM), and what slows a machine — a neighbour, a
        lower clock — slows several shapes at once, so one shape off alone is more likely noise."""
        return abs(self.median_drift) <= self.tolerance

    def summary(self) -> str:
        """One line: the verdict, the median drift and every shape's."""
        shapes = ", ".join(f"{p.id} {p.drift * 100:+.1f}%" for p in self.points)
        steal = "" if self.steal_share is None else f"; steal {self.steal_share * 100:.1f}%"
        verdict = "as calibrated" if self.matches else f"drifted (beyond ±{self.tolerance * 100:g}%)"
        return f"{verdict}: median {self.median_drift * 100:+.1f}% ({shapes}){steal}"

    @classmethod
    def from_dict(cls, d: dict) -> "ProfileCheck":
        """Back from `to_dict` (a fidelity JSON): the verdict is recomputed from the points."""
        points = tuple(CheckPoint(p["id"], p["measured_s"], p["predicted_s"], p.get("calibrated_s"))
                       for p in d["points"])
        return cls(points, d.get("steal_share"), d.get("wall_s", 0.0), d.get("tolerance", DRIFT_TOLERANCE))

    def to_dict(self) -> dict:
        return {"points": [{**asdict(p), "drift": p.drift, "profile_error": p.profile_error} for p in self.points], "steal_share": self.steal_share,
                "wall_s": self.wall_s, "tolerance": self.tolerance, "max_abs_drift": self.max_abs_drift,
                "median_drift": self.median_drift, "matches": self.matches}


def check_profile(
    profile, model_path: str | Path, *, threads: int, engine=None, spec=None, quant=None, n_gpu_layers: int = 0,
    timeout_s: float = 300.0, on_event: Callable[[dict], None] | None = None,
) -> ProfileCheck:
    """Time the check shapes with `model_path` now and compare with `profile`'s predictions.

    `profile` is a `HardwareProfile`; the model's architecture and quantization come from the GGUF
    (or `spec`/`quant`); the engine preset defaults to llama.cpp (the probes run llama.cpp).
    """
    from calibrate.machine import CpuTimes
    from sim.catalog.engine_config import load_engine
    from sim.catalog.lookup import get_model
    from sim.cost.params import CostParams
    from sim.cost.roofline import CostModel

    spec = spec or get_model(str(model_path))
    quant = quant or spec.quant(spec.quant_override or spec.default_quant)
    engine = engine or load_engine("llama.cpp")
    calibration = profile.calibration or {}
    before = CpuTimes.now()
    run = run_plan(check_plan(model_path, n_threads=threads, n_gpu_layers=n_gpu_layers,
                              contexts=calibration.get("contexts")), on_event=on_event, timeout_s=timeout_s)
    steal = CpuTimes.now().steal_share_since(before)
    obs = [Observation(p.id, p.kind, p.prefill_tokens, p.prefill_context, p.decode_batch, p.decode_context,
                       p.median_s) for p in run.points]
    params = CostParams.from_profile(profile, quant, engine)
    kv_pad = int((calibration.get("fit") or {}).get("attention_kv_padding") or 0)  # as the fit priced the probes
    predicted = predict_observations(CostModel(spec, quant, params, kv_pad=kv_pad), params, obs)
    recorded: dict[str, float] = {}
    for p in calibration.get("probe_points", []):  # first of a repeated id (same shape, same session kind)
        recorded.setdefault(p["id"], p["measured_s"])
    points = tuple(CheckPoint(o.id, o.measured_s, float(pred), recorded.get(o.id))
                   for o, pred in zip(obs, predicted))
    return ProfileCheck(points=points, steal_share=steal, wall_s=run.wall_s)
