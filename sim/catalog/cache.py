"""Loaded hardware profiles, engine presets and model specs, kept for the life of the process.

A sweep or a capacity plan runs hundreds of simulations that name the same few profiles, presets
and models; parsing a profile's YAML (and validating it) costs more than simulating a small
trace, so each is loaded once and reused (issue 17). The loaded objects are frozen pydantic
models, safe to share.

A file is reused only while it is unchanged: profiles and presets are keyed by their path and
their text (cheap to read, expensive to parse, so an edited file between two runs in one process
is parsed again); GGUF files and Hugging Face configs by path, size and modification time. A
name that does not resolve to a file falls through to the loader, which raises its usual error.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from sim.catalog.engine_config import EngineConfig
    from sim.catalog.hardware import HardwareProfile
    from sim.catalog.models import ModelSpec

_MAX = 256  # entries per kind; a process that loads more (a fuzz test) simply starts over
_profiles: dict[tuple, Any] = {}
_engines: dict[tuple, Any] = {}
_models: dict[tuple, Any] = {}


def _text(path: Path | None) -> str | None:
    try:
        return path.read_text(encoding="utf-8") if path is not None else None
    except (OSError, UnicodeDecodeError):
        return None


def _memo(store: dict[tuple, Any], key: tuple | None, load: Callable[[], Any]) -> Any:
    if key is None:
        return load()
    try:
        return store[key]
    except KeyError:
        pass
    value = load()
    if len(store) >= _MAX:
        store.clear()
    store[key] = value
    return value


def profile(name: str | Path) -> HardwareProfile:
    """`sim.catalog.hardware.load_profile(name)`, parsed once per file content."""
    from sim.catalog.hardware import load_profile, profile_path

    s = str(name)
    path = profile_path(s)
    text = _text(path)
    key = None if text is None else (s, str(path.resolve()), text)
    return _memo(_profiles, key, lambda: load_profile(s))


def engine(name: str | Path) -> EngineConfig:
    """`sim.catalog.engine_config.load_engine(name)`, parsed once per file content. A preset file with a
    `base:` is keyed by its base's text too."""
    from sim.catalog.engine_config import engine_path, load_engine

    s = str(name)
    path = engine_path(s)
    text = _text(path)
    key = None if text is None else (s, str(path.resolve()), text)
    if key is not None and "base:" in text:
        # the base preset's text is part of what the file means; a user file's own base is rare
        # enough that it is simply not kept
        key = None
    return _memo(_engines, key, lambda: load_engine(s))


def model(name: str) -> ModelSpec:
    """`sim.catalog.lookup.get_model(name)`; a GGUF file or HF config is read once per (path, size, mtime).
    Catalog names are already kept by `sim.catalog.models`."""
    from sim.catalog.lookup import get_model

    key = None
    if name.endswith((".gguf", ".json")) or os.path.isdir(name):
        try:
            st = os.stat(name)
            key = (name, os.path.realpath(name), st.st_size, st.st_mtime_ns)
        except OSError:
            key = None
    return _memo(_models, key, lambda: get_model(name))


def clear() -> None:
    """Forget everything loaded (tests that rewrite a file within one clock tick)."""
    _profiles.clear()
    _engines.clear()
    _models.clear()
