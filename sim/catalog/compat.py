"""Deployments checked before they run: engine x quantization x hardware x parallelism.

The table is data, `sim/catalog/data/compat.yaml`, each rule cited like the engine presets. A rule
whose `when` matches a deployment either makes it **impossible** (a one-line `ConfigError` naming
the option at fault: exit 2 before anything is simulated — Ollama in FP8, llama.cpp with AWQ, vLLM
on an Apple GPU, `--tp 3` on a model with 32 attention heads) or says that it **runs as** something
other than what was asked (vLLM's FP8 on Ampere runs weight-only through FP8 Marlin): it is
simulated, priced as what really runs (the rule's `pricing` says how) and the note is printed with
the configuration and kept in the summary's `config.deployment_notes`.

A deployment no rule matches runs as asked: the table lists what is known not to work, it does not
certify the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from sim.errors import ConfigError

if TYPE_CHECKING:
    from sim.catalog.engine_config import EngineConfig
    from sim.catalog.hardware import HardwareProfile
    from sim.catalog.models import ModelSpec

TABLE = Path(__file__).parent / "data" / "compat.yaml"
_WHEN_KEYS = {"engines", "quants", "hw_vendors", "hw_not_vendors", "hw_generations"}
_CHECKS = {"tp_divides_heads"}


@dataclass(frozen=True)
class Rule:
    """One row of the table (see the header of compat.yaml)."""

    id: str
    when: dict[str, tuple[str, ...]]
    outcome: str  # "impossible" | "runs_as"
    message: str = ""
    field: str | None = None
    check: str | None = None
    runs_as: str = ""
    pricing: str = ""
    sources: tuple[dict[str, str], ...] = ()

    def matches(self, engine: str, quant: str, vendor: str, generation: str) -> bool:
        w = self.when
        return (("engines" not in w or engine in w["engines"]) and ("quants" not in w or quant in w["quants"])
                and ("hw_vendors" not in w or vendor in w["hw_vendors"])
                and ("hw_not_vendors" not in w or vendor not in w["hw_not_vendors"])
                and ("hw_generations" not in w or generation in w["hw_generations"]))


@lru_cache(maxsize=1)
def rules() -> tuple[Rule, ...]:
    """The table, validated (a malformed rule is an error naming the file and the rule)."""
    data = yaml.safe_load(TABLE.read_text()) or {}
    out = []
    for i, raw in enumerate(data.get("rules") or []):
        rid = raw.get("id") or f"rules.{i}"
        when = raw.get("when") or {}
        if set(when) - _WHEN_KEYS or raw.get("outcome") not in ("impossible", "runs_as") \
                or (raw.get("check") and raw["check"] not in _CHECKS) or not raw.get("sources"):
            raise ConfigError(f"malformed compatibility rule '{rid}' (when keys {sorted(_WHEN_KEYS)}, outcome "
                              f"impossible|runs_as, check in {sorted(_CHECKS)}, sources required)", file=TABLE)
        out.append(Rule(id=rid, when={k: tuple(str(x) for x in v) for k, v in when.items()},
                        outcome=raw["outcome"], message=" ".join(str(raw.get("message", "")).split()),
                        field=raw.get("field"), check=raw.get("check"), runs_as=str(raw.get("runs_as", "")),
                        pricing=" ".join(str(raw.get("pricing", "")).split()),
                        sources=tuple(raw.get("sources") or ())))
    return tuple(out)


def tp_heads_problem(model: ModelSpec, tp: int) -> str | None:
    """Why tensor parallelism of degree `tp` cannot split this model's heads, or None. Attention
    heads must divide evenly (each rank computes n_heads / tp of them); KV heads too while tp is
    below their number, and above it tp must be a multiple of them (each KV head is replicated
    tp / n_kv_heads times) — vLLM's rules (compat.yaml, tp-divides-attention-and-kv-heads)."""
    if tp <= 1:
        return None
    n, k = model.n_heads, model.n_kv_heads
    if n % tp:
        return (f"--tp {tp} cannot split {model.name}'s {n} attention heads evenly (tensor parallelism gives each "
                f"GPU n_heads / tp of them): use a divisor of {n}, e.g. {_divisors_near(n, tp)}")
    if tp < k and k % tp:
        return f"--tp {tp} cannot split {model.name}'s {k} KV heads evenly: use a divisor of {k}"
    if tp >= k and tp % k:
        return (f"--tp {tp} cannot replicate {model.name}'s {k} KV heads evenly (tp must be a multiple of {k} "
                "when it exceeds them)")
    return None


def _divisors_near(n: int, tp: int) -> str:
    ds = sorted((d for d in range(1, n + 1) if n % d == 0), key=lambda d: (abs(d - tp), d))[:2]
    return " or ".join(str(d) for d in sorted(ds))


def check_deployment(hw: HardwareProfile, engine: EngineConfig, model: ModelSpec, quant: str) -> list[str]:
    """Apply the table to one deployment: raise `ConfigError` (one line, the option at fault as
    its field) for the first impossible rule; return the notes of the rules it runs differently
    under ("quant fp8 runs as ...: ...")."""
    from sim.catalog.quant import get_quant

    q = get_quant(quant).name
    name = engine.name.split("@")[0]  # a release-pinned preset ("vllm@0.11") follows its engine's rules
    vendor, generation = str(hw.vendor or ""), str(getattr(hw, "generation", "") or "")
    ctx: dict[str, Any] = {"engine": name, "quant": q, "hw": hw.name, "vendor": vendor or "unknown vendor"}
    notes = []
    for rule in rules():
        if not rule.matches(name, q, vendor, generation):
            continue
        if rule.check == "tp_divides_heads":
            detail = tp_heads_problem(model, int(engine.tp or 1))
            if detail is None:
                continue
            ctx["detail"] = detail
        if rule.outcome == "impossible":
            raise ConfigError(f"{rule.message.format(**ctx)} [{rule.id}]", field=rule.field)
        notes.append(f"{name} {q} on {hw.name} runs as {rule.runs_as}; priced so: {rule.pricing} [{rule.id}]")
    return notes
