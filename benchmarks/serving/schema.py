"""The serving corpus's columns, in file order (README.md, "Schema"): the one list the import and
build scripts write and the schema tests (tests/test_serving_corpus*.py) check every CSV against."""

COLUMNS = [
    "row_id", "curve_id", "source", "source_ref", "publisher", "engine", "engine_version",
    "engine_flags", "device", "device_variant", "n_devices", "tp", "model", "quant",
    "kv_cache_dtype", "client", "dataset", "input_tokens", "output_tokens", "range_ratio",
    "num_prompts", "warmup", "ramp_up", "ignore_eos", "load_kind", "max_concurrency",
    "request_rate", "burstiness", "quantity", "statistic", "value", "as_printed", "derivation",
    "notes",
]
