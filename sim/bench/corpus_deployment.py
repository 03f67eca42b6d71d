"""What deployment a serving-corpus row names (benchmarks/serving/README.md: `model`, `engine`, `engine_version`),
resolved in this tree: the `model` cell -> a catalog entry (`model_id`: a catalog name, a Hugging Face repository
id from an entry's `hf_repos`, or a name the corpus writes without its id, NAMED_MODELS) and `engine` +
`engine_version` -> the engine preset release that stands for it (`release_of`). The one rule for both:
`sim.bench.corpus.point_from_row` (so `predict_row`) and the serving fit's load points
(calibrate/serving/rows.py, which imports these names back) resolve a row with it."""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

from sim.errors import ConfigError


@lru_cache(maxsize=1)
def model_aliases() -> dict[str, str]:
    """HF repository id -> catalog entry, from each entry's `hf_repos` in sim/catalog/data/models.yaml (the
    release, its instruct/coder siblings with the same config.json shapes, quantized copies): the ids are
    written once, in the catalog. An id two entries claim is an error naming both."""
    from sim.catalog.models import load_catalog

    out: dict[str, str] = {}
    for name, spec in load_catalog().items():
        for repo in spec.hf_repos:
            if out.setdefault(repo, name) != name:
                raise ValueError(f"hf_repos: {repo} is claimed by both {out[repo]} and {name}")
    return out


#: corpus `model` cells that name a model without its repository id, each mapped to the one catalog entry the
#: name can denote. Vultr's cookbook table "Nemotron Nano 30B (FP8, TP=2, 2 GPUs)" (benchmarks/serving/corpus_c.csv,
#: vLLM 0.16.0, 2026-03-11): the one NVIDIA model named Nemotron Nano at 30B total / 3B active is Nemotron 3 Nano
#: 30B-A3B (its predecessors Nemotron Nano 2 are 9B and 12B dense; Nemotron 3.5 Lightning is another name), and its
#: FP8 release is NVIDIA's nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-FP8 (the catalog's hf_repos)
NAMED_MODELS = {
    "Nemotron Nano 30B (NVIDIA Nemotron Nano 30B-A3B FP8; exact HF repo id not printed in this table)":
        "nemotron-3-nano-30b-a3b",
}


def catalog_models() -> set[str]:
    """The model catalog's entry names (sim/catalog/data/models.yaml)."""
    from sim.catalog.models import load_catalog

    return set(load_catalog())


def model_id(name: str, catalog: set[str] | None = None) -> str | None:
    """The catalog entry a corpus `model` cell names, or None: the name itself when `catalog` (default: the
    shipped catalog's names, `catalog_models`) has it, else the entry whose `hf_repos` lists it
    (`model_aliases`) or that NAMED_MODELS maps it to, when `catalog` has that entry."""
    catalog = catalog_models() if catalog is None else catalog
    if name in catalog:
        return name
    alias = model_aliases().get(name) or NAMED_MODELS.get(name)
    return alias if alias in catalog else None


#: upstream vLLM x.y.0 release dates, as the GitHub release pages give them
#: (https://github.com/vllm-project/vllm/releases/tag/v0.6.0 ... /tag/v0.12.0): the release current at a
#: date is the newest one released on or before it. v0.7.0 (2025-01-27) is the last V0-default release
#: line; V1 became the default engine in v0.8.0 (2025-03-18, its release notes: "We have now enabled V1
#: engine by default (#13726)"). Only minor releases matter here: `release_of` maps x.y to a preset.
#: Checked on the one dated image in the corpus (rocm/vllm-dev:20250112, benchmarks/serving/amd_rocm.csv): the
#: ROCm/vllm fork's main on 2025-01-12 was 3efdd2be6 (2025-01-09), one commit after tag v0.6.6+rocm (c040f0eb9,
#: 2025-01-08), and its newest upstream commits are of 2025-01-06 (merged by ROCm/vllm PR #350,
#: upstream_merge_25_1_6; github.com/ROCm/vllm/commit/3efdd2be6): upstream 0.6.6-era code, vllm@0.7 (covers 0.6).
VLLM_RELEASE_DATES = (
    ("2024-09-04", (0, 6)),   # https://github.com/vllm-project/vllm/releases/tag/v0.6.0
    ("2025-01-27", (0, 7)),   # https://github.com/vllm-project/vllm/releases/tag/v0.7.0
    ("2025-03-18", (0, 8)),   # https://github.com/vllm-project/vllm/releases/tag/v0.8.0
    ("2025-05-15", (0, 9)),   # https://github.com/vllm-project/vllm/releases/tag/v0.9.0
    ("2025-07-24", (0, 10)),  # https://github.com/vllm-project/vllm/releases/tag/v0.10.0
    ("2025-10-02", (0, 11)),  # https://github.com/vllm-project/vllm/releases/tag/v0.11.0
    ("2025-12-03", (0, 12)),  # https://github.com/vllm-project/vllm/releases/tag/v0.12.0
)

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")


def build_date(text: str):
    """The build date a version text states, or None: a YYYYMMDD stamp standing alone (`vllm-dev:20250112`;
    not digits inside a commit hash) wins; else "Mon YYYY" ("build of Jan 2025"), read as the month's first
    day (the release current when the month began, the newest a build of that month surely had)."""
    t = str(text or "").lower()
    m = re.search(r"(?<![0-9a-z])(20\d\d)(0[1-9]|1[0-2])(0[1-9]|[12]\d|3[01])(?![0-9a-z])", t)
    if m:
        try:
            return datetime.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
        except ValueError:
            pass
    m = re.search(r"\b(" + "|".join(_MONTHS) + r")[a-z]*\.? (20\d\d)\b", t)
    if m:
        return datetime.date(int(m.group(2)), _MONTHS.index(m.group(1)) + 1, 1)
    return None


def dated_release(text: str, table=VLLM_RELEASE_DATES) -> tuple[int, int] | None:
    """The (major, minor) release current at the date `text` states (`build_date`): the newest in `table`
    released on or before it, the oldest one for a date before them all; None when no date is stated."""
    when = build_date(text)
    if when is None:
        return None
    current = [mm for d, mm in table if datetime.date.fromisoformat(d) <= when]
    return current[-1] if current else table[0][1]


def release_of(engine: str, version: str) -> str | None:
    """The engine preset release (`vllm@0.11`) for a printed engine version; None if no preset. The
    release whose `covers` range holds the version (sim.catalog.engine_config.release_for_version);
    a version between ranges (vLLM 0.8.x: V1 already the default engine, as in 0.10) the release above
    it (vllm@0.10), one below every range the oldest release, and a version above every covered range
    (vLLM 0.14.1, 0.16, ...) the newest release: issue 38 item 3, "the newest the default".
    A version with no major.minor but a date (`rocm/vllm-dev:20250112`, "vLLM build of Jan 2025") the
    release that was current at that date (`dated_release`, from the upstream release dates in
    VLLM_RELEASE_DATES); one with neither (`nightly`, `unknown`) the newest release, as above."""
    from sim.catalog.engine_config import load_engine

    try:
        from sim.catalog.engine_config import release_for_version

        rel = release_for_version(engine, str(version or "").strip().lstrip("v"))
        if rel:
            return f"{engine}@{rel}"
    except Exception:  # noqa: BLE001 - no releases for this preset (llama.cpp ...): the mapping below
        pass
    v = str(version or "").strip().lower()
    m = re.search(r"(\d+)\.(\d+)", v)
    major_minor = (int(m.group(1)), int(m.group(2))) if m else None
    if engine == "vllm":
        dated = dated_release(v, VLLM_RELEASE_DATES) if major_minor is None else None
        if dated is not None:  # a dated build (ROCm dev image): the release current at its date
            major_minor = dated
        if major_minor is None:  # nightly, unknown, no date: the newest release modelled
            rel = "0.11"
        elif major_minor < (0, 8):
            rel = "0.7"
        elif major_minor < (0, 11):
            rel = "0.10"
        else:
            rel = "0.11"
    elif engine == "sglang":
        rel = "0.4" if major_minor is not None and major_minor < (0, 5) else "0.5"
        when = build_date(v) if major_minor is None else None
        if when is not None and when.year <= 2024:
            # a dated SGLang build of 2024 ("SGLang of Dec 2024") predates 0.5 (v0.4.0 released 2024-12-04,
            # https://lmsys.org/blog/2024-12-04-sglang-v0-4/; 0.5.x came in 2025): its release is 0.4
            rel = "0.4"
    elif engine == "trtllm":
        rel = "0.x" if major_minor is not None and major_minor < (1, 0) else "1.0"
    elif engine in ("llama.cpp", "mlx", "ollama"):
        return engine
    else:
        return None
    name = f"{engine}@{rel}"
    try:
        load_engine(name)
    except Exception:  # noqa: BLE001 - a release this tree does not ship: the preset's default
        return engine
    return name


def row_model(row: Mapping) -> str:
    """The model a corpus row's deployment runs: its `model` cell's catalog entry (`model_id`), or the cell as
    written when it names a model file (a GGUF file, a config.json or a folder holding one: sim.catalog.lookup
    reads those). Any other name is a one-line error naming the row and the model."""
    name = str(row.get("model") or "")
    resolved = model_id(name)
    if resolved is not None:
        return resolved
    if name.endswith((".gguf", ".json")) or (name and Path(name).is_dir()):
        return name
    raise ConfigError(f"unknown model {name!r}: not a catalog name, a Hugging Face id in a catalog entry's "
                      "hf_repos (sim/catalog/data/models.yaml) or a name NAMED_MODELS maps",
                      file=row.get("row_id"), field="model")


def row_engine(row: Mapping) -> str:
    """The engine a corpus row's deployment runs: the preset release its `engine` and `engine_version` stand for
    (`release_of`, as the serving fit replays it); the cell as written when it already names a release
    (`vllm@0.7`) or `release_of` knows no preset for it (the engine lookup then takes or refuses it)."""
    engine = str(row.get("engine") or "vllm").strip()
    if "@" in engine:
        return engine
    return release_of(engine, row.get("engine_version")) or engine
