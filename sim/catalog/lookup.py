"""`get_model`: a model by catalog name, or read from a file (a GGUF header or a Hugging Face config.json).

The file readers (`sim.catalog.model_readers`) are imported only when a file is named, so a run of a
catalog model does not load them (start-up, issue 17).
"""

from __future__ import annotations

import difflib
from pathlib import Path

from sim.catalog.models import ModelSpec, load_catalog
from sim.errors import ConfigError


def get_model(name_or_path: str) -> ModelSpec:
    """A catalog model by name, or a spec read from a GGUF file or a Hugging Face config.json."""
    p = Path(name_or_path)
    if name_or_path.endswith(".gguf"):
        from sim.catalog.model_readers import spec_from_gguf

        return spec_from_gguf(p)
    if name_or_path.endswith(".json") or (p.is_dir() and (p / "config.json").is_file()):
        from sim.catalog.model_readers import spec_from_hf_config

        return spec_from_hf_config(p)
    cat = load_catalog()
    if name_or_path in cat:
        return cat[name_or_path]
    close = difflib.get_close_matches(name_or_path, list(cat), n=4, cutoff=0.4)
    hint = f"; did you mean: {', '.join(close)}?" if close else f"; known: {', '.join(cat)}"
    raise ConfigError(f"unknown model '{name_or_path}'{hint}", field="--model")
