"""A `ModelSpec` from a model file: a GGUF header or a Hugging Face `config.json`.

`spec_from_gguf` reads the key/value metadata and the tensor table of the GGUF header (with the
`gguf` package's value types and block sizes) and never touches the weight data, so a 40 GB file
opens in well under a second. The weight bytes it reports are the file's real tensor bytes (sum of every tensor's
`n_bytes`), so a GGUF spec's `weight_bytes()` is exact for the file's own quantization.

`spec_from_hf_config` maps a config.json's keys to ModelSpec fields for the model types in
`HF_MODEL_TYPES` (a table, not a chain of ifs). Both raise `ConfigError` naming the file and the
missing or bad field.

The GGUF reader lives in `sim.catalog.gguf_reader`, the config.json reader in `sim.catalog.hf_config`;
this module is where callers import both from.
"""

from __future__ import annotations

from sim.catalog.gguf_reader import (
    GGUF_FILE_TYPES,
    GGUF_SWA_PATTERN,
    GGUF_TENSOR_TYPES,
    GGUFHeader,
    GGUFTensorInfo,
    LongArray,
    read_gguf_header,
    spec_from_gguf,
)
from sim.catalog.hf_config import HF_DTYPES, HF_MODEL_TYPES, HF_QUANT_METHODS, HFModelType, spec_from_hf_config

__all__ = [
    "GGUF_FILE_TYPES", "GGUF_SWA_PATTERN", "GGUF_TENSOR_TYPES", "GGUFHeader", "GGUFTensorInfo", "LongArray",
    "read_gguf_header", "spec_from_gguf",
    "HF_DTYPES", "HF_MODEL_TYPES", "HF_QUANT_METHODS", "HFModelType", "spec_from_hf_config",
]
