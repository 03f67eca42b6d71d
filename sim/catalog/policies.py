"""The names of the scheduling policies and KV allocators an engine preset may use, each declared once.

The engine implements the policies (`sim.engine.schedulers`, `sim.engine.kv`); the catalog, which
sits below the engine and may not import it (tests/test_architecture.py), reads and validates the
presets that name them. So the catalog owns the vocabulary and the engine's classes join it:

- `SCHEDULERS` / `KV_ALLOCATORS` hold the names a preset, a sweep or `--scheduler` / `--kv` accept,
  in the order `--help` and error messages list them, with the one fact about a scheduling policy
  the configuration itself needs (`per_slot_context`: `EngineConfig.context_limits`).
- A `Scheduler` or `KVAllocator` subclass with a `name` calls `declare_scheduler` /
  `declare_allocator` when Python defines it (`__init_subclass__`): a name already here must agree
  with the class (a built-in policy cannot drift from this table: importing the engine fails), a new
  name is added. A policy written in a file of its own is therefore accepted by presets and
  `--scheduler` as soon as that file is imported, with no edit here.
- The built-in names below are what a preset can name before the engine is imported (loading a
  preset, `infersim engines show`); tests/test_extension_names.py checks that they are exactly the
  engine's built-in registries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SchedulerPolicy:
    """A scheduling policy as the configuration sees it."""

    name: str
    #: `max_num_seqs` slots each own a share of `context_size` (`context_mode`), and a request may hold at
    #: most its slot's share (llama-server's slots; `EngineConfig.context_limits`)
    per_slot_context: bool = False


#: Scheduling policies by name, in the order `--help` lists them.
SCHEDULERS: dict[str, SchedulerPolicy] = {p.name: p for p in (
    SchedulerPolicy("static"), SchedulerPolicy("continuous"), SchedulerPolicy("chunked"), SchedulerPolicy("inflight"),
    SchedulerPolicy("prefill_first"), SchedulerPolicy("sequential"), SchedulerPolicy("slots", per_slot_context=True),
)}
#: KV allocators by name.
KV_ALLOCATORS: list[str] = ["contiguous", "paged"]
#: The names shipped with infersim (what the engine's registries hold before any other policy is imported).
BUILTIN_SCHEDULERS = tuple(SCHEDULERS)
BUILTIN_KV_ALLOCATORS = tuple(KV_ALLOCATORS)


def declare_scheduler(name: str, *, per_slot_context: bool = False) -> SchedulerPolicy:
    """Add a scheduling policy's name (a `sim.engine.schedulers.Scheduler` subclass does on definition);
    a name already declared must say the same about itself."""
    policy = SchedulerPolicy(name, per_slot_context=bool(per_slot_context))
    known = SCHEDULERS.setdefault(name, policy)
    if known != policy:
        raise TypeError(f"scheduler '{name}' is declared as {known}, its class says {policy}")
    return known


def declare_allocator(name: str) -> None:
    """Add a KV allocator's name (a `sim.engine.kv.KVAllocator` subclass does on definition)."""
    if name not in KV_ALLOCATORS:
        KV_ALLOCATORS.append(name)


def undeclare(name: str) -> None:
    """Forget a policy that is not built in (tests that define one)."""
    if name in BUILTIN_SCHEDULERS or name in BUILTIN_KV_ALLOCATORS:
        raise ValueError(f"'{name}' is built in")
    SCHEDULERS.pop(name, None)
    if name in KV_ALLOCATORS:
        KV_ALLOCATORS.remove(name)


def choices(names) -> str:
    """`a|b|c`, as option help lists the accepted names."""
    return "|".join(names)


def _one_of(value: Any, names) -> Any:
    """`value` if it is one of `names`, else pydantic's own error for a `Literal` field ("Input should
    be 'a', 'b' or 'c'"), so a preset, an override or a sweep with an unknown name reads as it did when
    these fields were `Literal`s."""
    names = list(names)
    if isinstance(value, str) and value in names:
        return value
    from pydantic_core import PydanticCustomError  # here: `infersim` imports this module at start-up (light)
    quoted = [repr(n) for n in names]
    expected = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})


def known_scheduler(value: Any) -> Any:
    """Validator of `EngineConfig.scheduler`: a declared policy name."""
    return _one_of(value, SCHEDULERS)


def known_allocator(value: Any) -> Any:
    """Validator of `EngineConfig.kv_allocator`: a declared allocator name."""
    return _one_of(value, KV_ALLOCATORS)
