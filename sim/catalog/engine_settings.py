"""The parts of an engine preset (`sim.catalog.engine_config.EngineConfig`) that are models of their own:
efficiency multipliers, citations, hardware rules, speculative decoding and SGLang's new-token ratio.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

if TYPE_CHECKING:
    from sim.catalog.hardware import HardwareProfile

GIB = 2**30

_FROZEN = ConfigDict(extra="forbid", frozen=True)


class EfficiencyScale(BaseModel):
    """Multipliers on the hardware profile's efficiencies (achieved / peak) for this engine.

    1.0 means "this engine achieves what the profile says"; profiles' efficiencies are measured or
    set for a well-optimised engine (vLLM/TRT-LLM class kernels). A value below 1 models an engine
    whose kernels reach a smaller share of peak on the same chip. Capped at 2 so a typo cannot make
    an engine faster than twice its profile.
    """

    model_config = _FROZEN
    compute: float = Field(1.0, gt=0, le=2)
    bandwidth: float = Field(1.0, gt=0, le=2)
    attention: float = Field(1.0, gt=0, le=2)


class EngineSource(BaseModel):
    """One citation: where the defaults in `fields` were read, and for which engine version.

    `url: engineering-estimate` marks values that are our estimate rather than a published default;
    `note` then says how the estimate was made. `url: fitted:FILE` marks values fitted to measurements
    by this repository's own scripts, FILE the report with their held-out error.
    """

    model_config = _FROZEN
    url: str
    version: str = ""
    fields: list[str] = Field(default_factory=list)
    note: str = ""


class RuleCondition(BaseModel):
    """When a hardware rule applies: every given condition must hold (memory in GiB = 2^30 bytes,
    compared with the profile's memory capacity, as engines compare their device's total memory). A rule
    with `weight_format` depends on the checkpoint too: `for_hardware` skips it and
    sim.catalog.weight_format.for_weight_format applies it once the checkpoint is known."""

    model_config = _FROZEN
    kind: list[Literal["gpu", "unified-soc", "cpu"]] | None = None
    min_memory_gib: float | None = Field(None, ge=0)
    max_memory_gib: float | None = Field(None, gt=0, description="exclusive upper bound")
    name_excludes: list[str] = Field(default_factory=list, description="substrings of the profile name")
    vendor: list[str] | None = Field(None, description="the profile's `vendor` (NVIDIA, AMD, Apple, ...), any case")
    generation: list[str] | None = Field(
        None, description="the profile's `generation` (hopper, blackwell, cdna3, ...), any case")
    weight_format: list[Literal["block-fp8"]] | None = Field(
        None, description="the checkpoint's weight format (sim.catalog.weight_format: block-fp8 = FP8 with "
                          "128x128 weight-block scales, config.json quantization_config weight_block_size)")

    @field_validator("vendor", "generation")
    @classmethod
    def _known(cls, v: list[str] | None, info: ValidationInfo) -> list[str] | None:
        """A name no hardware profile (shipped or the user's) carries is a typo: an error naming the known ones."""
        if v is None:
            return v
        known = profile_field_values(info.field_name)
        if not known:  # no profile readable (a stripped install): nothing to check against
            return v
        bad = [x for x in v if x.lower() not in {k.lower() for k in known}]
        if bad:
            raise ValueError(f"unknown {info.field_name} {', '.join(repr(b) for b in bad)}; known: "
                             f"{', '.join(sorted(known, key=str.lower))}")
        return v

    def matches(self, hw: "HardwareProfile", weight_format: str | None = None) -> bool:
        """`weight_format`: the checkpoint's (None: unknown, so a rule that names one does not apply)."""
        mem_gib = hw.memory_bytes / GIB
        name = f"{hw.name} {hw.display_name}".lower()
        return (
            (self.kind is None or hw.kind in self.kind)
            and (self.min_memory_gib is None or mem_gib >= self.min_memory_gib)
            and (self.max_memory_gib is None or mem_gib < self.max_memory_gib)
            and not any(x.lower() in name for x in self.name_excludes)
            and (self.vendor is None or hw.vendor.lower() in {x.lower() for x in self.vendor})
            and (self.generation is None or hw.generation.lower() in {x.lower() for x in self.generation})
            and (self.weight_format is None or weight_format in self.weight_format)
        )


_PROFILE_VALUES: dict[str, frozenset[str]] = {}


def profile_field_values(field: str) -> frozenset[str]:
    """The values of a top-level scalar field (`vendor`, `generation`) across the hardware profiles found
    (shipped and the user's), read from each file's `field: value` line without parsing the profiles
    (an engine preset is validated on every load; this keeps that to a few small file reads)."""
    import re

    from sim.catalog.hardware import available_profiles

    paths = available_profiles()
    key = f"{field}:{sorted(map(str, paths.values()))}"
    if key not in _PROFILE_VALUES:
        pat = re.compile(rf"^{re.escape(field)}:\s*['\"]?([^'\"#\n]+?)['\"]?\s*(#.*)?$", re.M)
        vals = set()
        for path in paths.values():
            try:
                m = pat.search(path.read_text(encoding="utf-8"))
            except OSError:
                continue
            if m and m.group(1).strip():
                vals.add(m.group(1).strip())
        _PROFILE_VALUES[key] = frozenset(vals)
    return _PROFILE_VALUES[key]


class HardwareRule(BaseModel):
    """A default the engine picks from the device it runs on (e.g. vLLM's larger batch defaults on
    >= 70 GiB GPUs, SGLang's memory-dependent chunk size). `set` holds EngineConfig fields;
    `memory_reserved_gib` sets memory_fraction = 1 - reserved / device memory."""

    model_config = _FROZEN
    when: RuleCondition = RuleCondition()
    set: dict[str, Any] = Field(default_factory=dict)
    memory_reserved_gib: float | None = Field(None, ge=0)
    note: str = ""


class SpeculativeSettings(BaseModel):
    """Speculative decoding as an engine runs it (vLLM `--speculative-config`, SGLang `--speculative-*`,
    llama-server `--model-draft`): a drafter proposes `k` tokens per sequence, the target verifies
    them in one forward of k + 1 positions (see `sim.cost.speculative`).

    - `method`: `draft` (a smaller model of the same vocabulary, `draft_model`, priced by the same
      cost model) or `eagle` (a one-layer head on the target's hidden states, priced as
      `draft_cost_fraction` x one target decode step per drafted token) or `mtp` (the model's own
      multi-token-prediction modules, DeepSeek-V3 / GLM-4.5 / Qwen3-Next: vLLM `--speculative-config
      '{"method": "mtp", ...}'`; one draft step costs `ModelSpec.mtp_draft_cost_fraction` of a decode step
      unless `draft_cost_fraction` says otherwise, and the MTP weights join the model's).
    - `acceptance_rate`: probability each drafted token is accepted, i.i.d. per token (Leviathan et
      al. 2023's alpha); measured acceptance depends on the model pair and the text.
    """

    model_config = _FROZEN
    method: Literal["draft", "eagle", "mtp"] = "draft"
    k: int = Field(4, ge=1, le=64, description="tokens drafted per verify step")
    acceptance_rate: float = Field(0.7, ge=0, le=1, description="per-token acceptance probability (i.i.d.)")
    draft_model: str | None = Field(None, description="catalog name or path of the draft model (method: draft)")
    draft_quant: str | None = Field(None, description="quantization of the draft model; None = the target's")
    draft_cost_fraction: float | None = Field(
        None, gt=0, le=1, description="one draft step as a fraction of a target decode step (method: eagle)"
    )

    @model_validator(mode="after")
    def _drafter_given(self) -> "SpeculativeSettings":
        if self.method == "draft" and not self.draft_model:
            raise ValueError("method 'draft' needs draft_model")
        if self.method == "eagle" and self.draft_cost_fraction is None:
            raise ValueError("method 'eagle' needs draft_cost_fraction")
        return self


class NewTokenRatio(BaseModel):
    """SGLang's admission reservation for tokens not yet generated (managers/scheduler.py,
    schedule_policy.py PrefillAdder): a request is admitted only while the free KV tokens cover its
    uncached prompt plus `ratio` x min(max_new_tokens, clip) for it and, for every running request,
    `ratio` x min(its remaining max_new_tokens, clip). `ratio` starts at `init` x
    schedule_conservativeness, falls linearly to init x `min_factor` over `decay_steps` decode steps,
    is raised after a retraction (decode ran out of KV) to (decoded + `retract_steps` x n) / max_new
    of the running batch, and returns to `init` when the running batch empties."""

    model_config = _FROZEN
    init: float = Field(0.7, gt=0, le=1, description="SGLANG_INIT_NEW_TOKEN_RATIO x schedule_conservativeness")
    min_factor: float = Field(0.14, gt=0, le=1, description="SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR")
    decay_steps: float = Field(600, gt=0, description="SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS")
    clip_max_new_tokens: int = Field(4096, gt=0, description="SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION")
    retract_steps: int = Field(20, ge=0, description="retract_decode_steps: tokens per request the retraction estimate adds")
