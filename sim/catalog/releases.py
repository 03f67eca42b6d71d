"""Engine releases: a preset's `releases:` section, resolved for `--engine NAME@RELEASE`.

A preset's top-level fields describe its `default_release` (the newest modelled one); each entry of
`releases:` holds only the fields whose defaults differ in that release, with the sources they were
read from. A full engine version (`vllm@0.10.1`, a corpus row's `engine_version`) runs the modelled
release whose `covers` range holds it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sim.catalog.engine_settings import EngineSource
from sim.errors import ConfigError, pydantic_error_to_config_error
from sim.files import line_of

_FROZEN = ConfigDict(extra="forbid", frozen=True)


class EngineRelease(BaseModel):
    """One engine release in a preset's `releases:` section: the fields whose defaults differ from
    the preset's top level (which describes the newest release) and the sources they were read from."""

    model_config = _FROZEN
    version: str = ""
    covers: list[str] = Field(
        default_factory=list,
        description="[first, last] engine versions this release stands for when a full version is asked for "
                    "(`vllm@0.10.1` -> 0.10): the nearest modelled release, not a claim that every default is equal",
    )
    set: dict[str, Any] = Field(default_factory=dict)
    sources: list[EngineSource] = Field(default_factory=list)
    note: str = ""

    @field_validator("covers")
    @classmethod
    def _two_versions(cls, v: list[str]) -> list[str]:
        if v and (len(v) != 2 or _version_key(v[0]) > _version_key(v[1])):
            raise ValueError("covers must be [first, last] versions, first <= last")
        return v


def _version_key(v: str) -> tuple[int, ...]:
    """'0.10.1' -> (0, 10, 1); 'v0.5.4.post1' -> (0, 5, 4); '1.0.0rc4' -> (1, 0, 0); non-numeric parts end it."""
    import re

    parts = []
    for piece in str(v).strip().lstrip("vV").split("."):
        m = re.match(r"\d+", piece)
        if not m:
            break
        parts.append(int(m.group()))
        if m.end() != len(piece):
            break
    return tuple(parts)


def covers_version(rel: "EngineRelease", version: str) -> bool:
    """Whether `version` falls in the release's `covers` range (compared on as many parts as the bounds give)."""
    if not rel.covers:
        return False
    key = _version_key(version)
    lo, hi = (_version_key(b) for b in rel.covers)
    return bool(key) and lo <= key[: len(lo)] and key[: len(hi)] <= hi


def split_release(name: str) -> tuple[str, str | None]:
    """`vllm@0.7` -> ("vllm", "0.7"); `vllm` -> ("vllm", None)."""
    base, sep, release = str(name).partition("@")
    return (base, release.strip()) if sep else (base, None)


def apply_release(data: dict, path: Path, release: str | None) -> dict:
    """The preset's fields for one release: its `releases:` section's `set` over the top-level
    fields (which describe `default_release`), with the release's sources added. No release named
    = `default_release`. An unknown release is a ConfigError naming the known ones."""
    releases = data.pop("releases", None) or {}
    default = data.pop("default_release", None)
    if not isinstance(releases, dict):
        raise ConfigError("releases must be a mapping of release -> fields", file=path,
                          line=line_of(path, "releases"), field="releases")
    if release is None:
        release = default
    if release is None:
        return data
    name = data.get("name", path.stem)
    parsed: dict[str, EngineRelease] = {}
    for key, value in releases.items():
        try:
            parsed[str(key)] = EngineRelease.model_validate(value or {})
        except ValidationError as e:
            err = pydantic_error_to_config_error(e, file=path)
            raise ConfigError(f"releases.{key}: {err.problem}", file=path, line=line_of(path, "releases"),
                              field=f"releases.{key}.{err.field}" if err.field else "releases") from None
    asked = str(release)
    if asked not in parsed:
        # a full version (vllm@0.10.1) runs the modelled release whose `covers` range holds it
        release = next((k for k, r in parsed.items() if covers_version(r, asked)), None)
        if release is None:
            known = ", ".join(f"{name}@{k}" + (f" ({r.covers[0]}-{r.covers[1]})" if r.covers else "")
                              for k, r in parsed.items()) or "none"
            raise ConfigError(f"unknown release '{name}@{asked}'; known: {known}", field="--engine")
    rel = parsed[str(release)]
    merged = {**data, **rel.set, "release": str(release)}
    if rel.version:
        merged["version"] = rel.version
    if "efficiency_scale" in rel.set and isinstance(data.get("efficiency_scale"), dict):
        merged["efficiency_scale"] = {**data["efficiency_scale"], **rel.set["efficiency_scale"]}
    merged["sources"] = [s.model_dump() for s in rel.sources] + list(data.get("sources") or [])
    if rel.note:
        merged["notes"] = (data.get("notes", "") + f" [{release}] {rel.note}").strip()
    return merged
