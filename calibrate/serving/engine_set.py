"""An explicit engine-field override for every replay a serving fit makes (`calibrate.serving.fit.run(...,
engine_set=)`; benchmarks/serving_fit.py `--engine-set FIELD=VALUE`): a what-if such as the per-backend eager
launch counts (EngineConfig.eager_launch_backends, benchmarks/eager_backends_subset.py) run through the whole fit
without touching the presets or patching the simulator in-process.

The fields enter every replay's parameters (`with_engine_set`), so they reach the replayed EngineConfig through the
deployment's overrides (calibrate/serving/replay.py `replay`) and the replay cache key (`cache_key` spells the
parameters out): a run with and one without them never share a cache entry. Without any (None or {}) the parameters,
hence every key and result, are what they were before the argument existed. Fields the fit itself varies are
refused (overriding them would replace every candidate it compares with one value), as are names EngineConfig does
not have; values are validated, and normalised to JSON, against the field's type."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable


def _adapter(field):
    from typing import Annotated

    from pydantic import TypeAdapter

    return TypeAdapter(Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation)


def _field_validators(model, name: str, mode: str) -> list:
    """The model's own @field_validator functions for field `name` in `mode` ("before" / "after"), in declaration
    order: a TypeAdapter of the field's annotation alone does not run them (EngineConfig.gpu_layers's "integer
    >= 0 or 'auto'" rule lives in one)."""
    return [d.func for d in model.__pydantic_decorators__.field_validators.values()
            if name in d.info.fields and d.info.mode == mode]


def check_engine_set(engine_set: dict | None, refused: Iterable[str] = ()) -> dict:
    """`engine_set` ({EngineConfig field: value}) checked: {} for None or {}; a ValueError with a one-line message
    for a name EngineConfig.model_fields lacks, a field in `refused` (those the fit sets itself) or a value the
    field's type or its own field validators reject (EngineConfig's model-level checks, which relate fields of
    one engine, are left to the replay: the override applies to every engine's preset). Values come back
    normalised to their JSON form (a cache key holds them)."""
    from pydantic import ValidationError

    from sim.catalog.engine_config import EngineConfig

    fields, refused, out = EngineConfig.model_fields, set(refused), {}
    for name, value in (engine_set or {}).items():
        if name not in fields:
            close = difflib.get_close_matches(str(name), list(fields), n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ValueError(f"engine_set: EngineConfig has no field {name!r}{hint}")
        if name in refused:
            raise ValueError(f"engine_set: {name} is a field the serving fit sets itself; it cannot be overridden")
        ta = _adapter(fields[name])
        try:
            v = value
            for f in _field_validators(EngineConfig, name, "before"):
                v = f(v)
            v = ta.validate_python(v)
            for f in _field_validators(EngineConfig, name, "after"):
                v = f(v)
            out[name] = ta.dump_python(v, mode="json")
        except ValidationError as e:
            msg = e.errors()[0].get("msg", str(e)) if e.errors() else str(e)
            raise ValueError(f"engine_set: {name}={value!r}: {msg}".splitlines()[0]) from None
        except (ValueError, TypeError) as e:  # a field validator's own message
            raise ValueError(f"engine_set: {name}={value!r}: {e}".splitlines()[0]) from None
    return out


def with_engine_set(params: dict | None, engine_set: dict | None) -> dict:
    """A replay's parameters with the override's fields set over them (`params` as it is, a copy, when there is
    none: the cache key of a run without the override is what it always was)."""
    return {**(params or {}), **(engine_set or {})}


def parse_engine_set(items: Iterable[str] | None) -> dict:
    """{field: value} of `--engine-set FIELD=VALUE` arguments: VALUE parsed as JSON where it is JSON (true, 0.5,
    null, "x", {...}), else kept as the string. A ValueError (one line) for an item without '=' or a field given
    twice."""
    out: dict = {}
    for item in items or ():
        name, eq, raw = str(item).partition("=")
        name = name.strip()
        if not eq or not name:
            raise ValueError(f"--engine-set {item!r}: expected FIELD=VALUE")
        if name in out:
            raise ValueError(f"--engine-set: {name} given twice")
        try:
            out[name] = json.loads(raw)
        except ValueError:
            out[name] = raw
    return out
