"""Sweep files: a YAML grid (or list) of simulation options, expanded into combinations.

The smallest sweep file is a trace and a grid:

    trace: workloads/examples/chat.jsonl
    grid:
      hw: [dgx-spark, rtx-4090]
      engine: [vllm, ollama]
      concurrency: [1, 4]

Richer forms (all optional):

    name: my sweep                      # title of the report
    trace: workloads/examples/chat.jsonl  # fixed fields: trace (.jsonl, or a .yaml generator
                                        #   spec of `infersim trace gen`), hw, model, quant, engine,
    model: llama-3.1-8b                 #   concurrency, rate_scale, rate_rps, seed, efficiency_from
    overrides: {block_size: 32}         # engine-preset fields fixed for every combination
    runs:                               # an explicit list; each entry is crossed with the grid
      - {hw: h100-sxm, engine: vllm}
      - {hw: dgx-spark, engine: llama.cpp, quant: q4_k_m}
    grid:                               # the cartesian product of these lists
      concurrency: [1, 2, 4, 8]
      kv: [paged, contiguous]           # any other key is an engine override (aliases below)
    costs: {years: 3, electricity_usd_per_kwh: 0.15, utilization: 1.0}
    slo: {ttft_p90: 2s, tpot_p90: 100ms}  # a point that misses it is marked so, never "ok"

Combinations = (each `runs` entry, or one empty entry) x (the product of the `grid` lists, the
last key varying fastest), each laid over the fixed fields. A key that is not a run field is an
engine-preset override (`scheduler`, `kv_allocator`, `max_num_seqs`, ... see `sim.catalog.engine_config`);
`kv`, `max_seqs`, `max_batched_tokens` and `mem_fraction` are the `infersim run` flag names for
them. Load is either `concurrency` (closed loop: N users) or an open-loop arrival rate, given as
`rate_scale` (multiplier on the trace's own arrival rate) or `rate_rps` (target requests/s,
converted to a rate_scale from the trace's native rate).

Every combination has a stable key (a hash of its fields and of the trace file's bytes), so a
result written once is recognised when the sweep is resumed.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sim.catalog.engine_options import SWEEP_ALIASES
from sim.errors import ConfigError, pydantic_error_to_config_error
from sim.files import file_sha256
from sim.plan.costs import OwnershipAssumptions
from sim.plan.workload import materialize

#: Fields of one simulation run (the rest of a combination's keys are engine overrides).
RUN_FIELDS = ("trace", "hw", "model", "quant", "engine", "concurrency", "rate_scale", "rate_rps", "seed",
              "efficiency_from")

#: `infersim run` flag names -> EngineConfig field names (kv, max_seqs, max_batched_tokens, ubatch, mem_fraction).
OVERRIDE_ALIASES = SWEEP_ALIASES


class Combination(BaseModel):
    """One point of a sweep: everything `sim.api.RunSpec` needs, plus where it sits in the sweep."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int = Field(ge=0, description="position in the expanded sweep (report order)")
    trace: str = Field(description="path of the trace file, absolute")
    trace_sha256: str = ""
    hw: str
    model: str | None = None
    quant: str | None = None
    engine: str | None = None
    overrides: dict[str, Any] = Field(default_factory=dict)
    concurrency: int | None = Field(None, gt=0)
    rate_scale: float | None = Field(None, gt=0)
    rate_rps: float | None = Field(None, gt=0)
    seed: int = 0
    efficiency_from: str | None = None

    @model_validator(mode="after")
    def _one_load(self) -> "Combination":
        given = [n for n in ("concurrency", "rate_scale", "rate_rps") if getattr(self, n) is not None]
        if len(given) > 1:
            raise ValueError(f"give one load per combination, got {' and '.join(given)}")
        return self

    @property
    def key(self) -> str:
        """Stable 16-hex-digit id: sha256 of the fields that change the result (not the index or
        the trace's location, but the trace's bytes). Unset fields are left out, so a field added
        later does not change the keys of existing journals."""
        fields = self.model_dump(exclude={"index", "trace"}, exclude_none=True)
        blob = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


class SweepFile(BaseModel):
    """The YAML document of a sweep, as written by the user (before expansion)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = None
    trace: str | None = None
    hw: str | None = None
    model: str | None = None
    quant: str | None = None
    engine: str | None = None
    concurrency: int | None = Field(None, gt=0)
    rate_scale: float | None = Field(None, gt=0)
    rate_rps: float | None = Field(None, gt=0)
    seed: int = 0
    efficiency_from: str | None = None
    overrides: dict[str, Any] = Field(default_factory=dict)
    runs: list[dict[str, Any]] = Field(default_factory=list)
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    costs: dict[str, float] = Field(default_factory=dict)
    slo: dict[str, Any] = Field(default_factory=dict)



class Sweep(BaseModel):
    """An expanded sweep: its combinations and the cost assumptions of its report."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    source: str
    combinations: list[Combination]
    costs: OwnershipAssumptions
    slo: dict[str, float | None] | None = None  # sim.plan.planner.SLO's fields; None = no SLO


# ---- loading -----------------------------------------------------------------------------------


def _key_lines(text: str) -> dict[str, int]:
    """1-based line of every mapping key up to two levels deep ('grid', 'grid.hw', 'runs.0.hw').

    Lets an error name the line of the field that caused it, not just the file.
    """
    lines: dict[str, int] = {}

    def walk(node: yaml.Node, prefix: str, depth: int) -> None:
        if depth > 3:
            return
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                name = prefix + str(k.value)
                lines[name] = k.start_mark.line + 1
                walk(v, name + ".", depth + 1)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                lines[f"{prefix}{i}"] = item.start_mark.line + 1
                walk(item, f"{prefix}{i}.", depth + 1)

    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return lines
    if root is not None:
        walk(root, "", 0)
    return lines


def _line_for(lines: dict[str, int], field: str) -> int | None:
    """The line of `field` or of its closest named parent."""
    parts = field.split(".")
    while parts:
        if ".".join(parts) in lines:
            return lines[".".join(parts)]
        parts.pop()
    return None


@lru_cache(maxsize=64)
def _file_sha256(path: str) -> str:
    """A trace's hash, computed once per process (a sweep keys every combination with it)."""
    return file_sha256(path)


def resolve_trace_path(trace: str, base_dir: Path) -> Path | None:
    """A relative trace path is looked up in the current directory, then next to the sweep file."""
    p = Path(trace).expanduser()
    if p.is_absolute():
        return p if p.is_file() else None
    for candidate in (Path.cwd() / p, base_dir / p):
        if candidate.is_file():
            return candidate.resolve()
    return None


def _split_fields(entry: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run fields and engine overrides of one merged entry, aliases resolved."""
    run: dict[str, Any] = {}
    overrides: dict[str, Any] = {}
    for k, v in entry.items():
        if k in RUN_FIELDS:
            run[k] = v
        elif k == "overrides":
            overrides.update(v or {})
        else:
            overrides[OVERRIDE_ALIASES.get(k, k)] = v
    return run, overrides


def _check_override_names(overrides: dict[str, Any], source: str, lines: dict[str, int]) -> None:
    """An override must name an `EngineConfig` field; a typo fails here, before any simulation."""
    from sim.api import DEPLOYMENT_FIELDS  # replicas, router, disagg: carried in overrides to RunSpec
    from sim.catalog.engine_config import EngineConfig

    known = (set(EngineConfig.model_fields) - {"name", "sources"}) | set(DEPLOYMENT_FIELDS)
    for name in overrides:
        if name not in known:
            back = {v: k for k, v in OVERRIDE_ALIASES.items()}
            written = back.get(name, name)
            field = next((f for f in lines if f == written or f.endswith("." + written)), written)
            close = difflib.get_close_matches(name, sorted(known) + list(RUN_FIELDS), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ConfigError(f"unknown run field or engine override '{written}'{hint}", file=source,
                              line=_line_for(lines, field), field=field)


def expand(doc: SweepFile, *, source: str = "<sweep>", base_dir: Path | None = None,
           lines: dict[str, int] | None = None, cache_dir: Path | None = None) -> Sweep:
    """Every combination of a sweep document, in report order.

    Raises ConfigError naming the file, line and field of the first invalid combination (unknown
    trace file, missing hw, two loads at once, ...).
    """
    base_dir = base_dir or Path.cwd()
    lines = lines or {}
    fixed = {k: getattr(doc, k) for k in RUN_FIELDS if getattr(doc, k) is not None}
    fixed["seed"] = doc.seed
    runs = doc.runs or [{}]
    grid_keys = list(doc.grid)
    for k in grid_keys:
        if not doc.grid[k]:
            raise ConfigError("empty list: give at least one value", file=source,
                              line=_line_for(lines, f"grid.{k}"), field=f"grid.{k}")
    grid_points = list(itertools.product(*(doc.grid[k] for k in grid_keys)))

    combos: list[Combination] = []
    for r_i, run in enumerate(runs):
        where_run = f"runs.{r_i}" if doc.runs else None
        if not isinstance(run, dict):
            raise ConfigError("each runs entry must be a mapping", file=source,
                              line=_line_for(lines, f"runs.{r_i}"), field=f"runs.{r_i}")
        for point in grid_points:
            entry = {**fixed, **run, **dict(zip(grid_keys, point)),
                     "overrides": {**doc.overrides, **(run.get("overrides") or {})}}
            run_fields, overrides = _split_fields(entry)
            _check_override_names(overrides, source, lines)
            trace = run_fields.get("trace")
            field_of = lambda name: (  # noqa: E731 - which YAML key set this field, for the error
                f"grid.{name}" if name in grid_keys else f"{where_run}.{name}" if where_run and name in run else name
            )
            if trace is None:
                raise ConfigError("no trace given (set `trace:` or a grid/runs `trace`)", file=source, field="trace")
            path = resolve_trace_path(str(trace), base_dir)
            if path is None:
                f = field_of("trace")
                raise ConfigError(f"trace file not found: {trace}", file=source, line=_line_for(lines, f), field=f)
            path = materialize(path, cache_dir)  # a generator spec (.yaml) becomes a trace file
            loads = [n for n in ("concurrency", "rate_scale", "rate_rps") if run_fields.get(n) is not None]
            if len(loads) > 1:
                f = next((field_of(n) for n in loads if field_of(n) != n), loads[-1])
                raise ConfigError(f"give one load per combination, got {' and '.join(loads)}", file=source,
                                  line=_line_for(lines, f), field=f)
            if run_fields.get("hw") is None:
                raise ConfigError("no hardware given (set `hw:` or a grid/runs `hw`)", file=source, field="hw")
            try:
                combo = Combination(
                    index=len(combos),
                    trace=str(path),
                    trace_sha256=_file_sha256(str(path)),
                    overrides=overrides,
                    **{k: v for k, v in run_fields.items() if k != "trace"},
                )
            except ValidationError as e:
                err = e.errors()[0]
                name = str(err["loc"][0]) if err.get("loc") else "grid"
                f = field_of(name)
                raise ConfigError(err.get("msg", "invalid value"), file=source, line=_line_for(lines, f), field=f) from None
            combos.append(combo)

    try:
        costs = OwnershipAssumptions(**doc.costs)
    except (TypeError, ValueError) as e:
        raise ConfigError(str(e), file=source, line=_line_for(lines, "costs"), field="costs") from None
    return Sweep(name=doc.name or Path(source).stem, source=source, combinations=combos, costs=costs,
                 slo=_slo(doc.slo, source, lines))


def _slo(given: dict[str, Any], source: str, lines: dict[str, int]) -> dict[str, float | None] | None:
    """The sweep's `slo:` block ({ttft_p90, tpot_p90}: durations as `infersim plan` takes them)."""
    if not given:
        return None
    from dataclasses import asdict

    from sim.plan.planner import SLO, parse_duration

    unknown = set(given) - {"ttft_p90", "tpot_p90"}
    if unknown:
        name = sorted(unknown)[0]
        raise ConfigError(f"unknown SLO '{name}'; give ttft_p90 and/or tpot_p90", file=source,
                          line=_line_for(lines, f"slo.{name}"), field=f"slo.{name}")
    try:
        slo = SLO(**{f"{k}_s": parse_duration(v, field=f"slo.{k}") for k, v in given.items()})
    except ConfigError as e:
        raise ConfigError(e.problem, file=source, line=_line_for(lines, e.field or "slo"), field=e.field or "slo") from None
    return asdict(slo)


def load_sweep(path: str | Path, *, cache_dir: Path | None = None) -> Sweep:
    """Read, validate and expand a sweep file; errors name the file, line and field.

    Traces generated from `.yaml` generator specs are written under `cache_dir`.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError("file not found", file=path)
    text = path.read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise ConfigError(f"invalid YAML: {getattr(e, 'problem', e)}", file=path,
                          line=mark.line + 1 if mark is not None else None) from None
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping with at least `trace` and `grid` (or `runs`)", file=path)
    lines = _key_lines(text)
    try:
        doc = SweepFile.model_validate(data)
    except ValidationError as e:
        err = pydantic_error_to_config_error(e, file=path)
        if err.field:
            err = ConfigError(err.problem, file=path, line=_line_for(lines, err.field), field=err.field)
        raise err from None
    return expand(doc, source=str(path), base_dir=path.parent.resolve(), lines=lines, cache_dir=cache_dir)
