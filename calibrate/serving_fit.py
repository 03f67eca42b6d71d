"""Serving corpus (benchmarks/serving/*.csv) replayed on the simulator, engine serving overheads
fitted to it, and the fit cross-validated by source and by device (issue 38, item 4).

Pieces, in the order benchmarks/serving_fit.py uses them:

- `load_corpus()` reads every CSV; `curves()` groups rows by curve and decides, per curve, whether
  it can be replayed: `exclusion(curve)` names the reason when not (an outlier, speculative decoding,
  a device without a hardware profile, a model not in the catalog, ShareGPT lengths not stated, a
  client this module cannot replay, rows the kernel-level fit already trained on). Nothing is
  dropped silently: every excluded row is listed with its reason.
- `load_points(curve)` turns the replayable rows into load points (one simulation each): the client
  as it ran (its own length distribution for `--random-range-ratio`, its load, its prompt count, capped
  at `prompt_cap()`), the engine release its version maps to (`release_of`), the device, model,
  quantization, KV dtype and TP it names.
- `run(rows, engine_set={field: value})` sets those EngineConfig fields in every replay the fit makes (a what-if:
  calibrate/serving/engine_set.py; `engine_set_of` checks them, `parse_engine_set` reads `--engine-set F=V`).
- `replay(point, params)` runs one point through sim.bench.serve.run_client with `params` (engine
  overrides such as iteration_overhead_ms) and returns the corpus quantities; a JSON cache keyed by
  the tree (code, profiles, catalog), the point's own engine preset, the point, the parameters and this
  module's `CACHE_VERSION` keeps reruns cheap.
- `residuals()` compares every measured (quantity, statistic) with its prediction; `metric_of()`
  maps them onto the four headline metrics (TTFT p50/mean, TTFT p99, TPOT/ITL, output throughput);
  `knee()` finds the highest load whose TTFT p50 stays under 3x its lowest-load value.
- `folds(points, by)` builds leave-one-group-out folds (by "source" = publisher, or "device"); the
  fit of a fold sees only its training points (`fit_engine_params` picks, per engine family, the grid
  point with the smallest median |log(predicted / measured)| over the training rows' headline
  metrics); its held-out points are then predicted with those parameters.

The code lives in the package calibrate/serving/, one module per job: `rows` (the corpus, curves,
exclusions, load points), `replay` (the cache and one replay), `fit` (residuals, knees, folds, the
fit, the cross-validated `run` and its bands) and `report` (bands_json, fidelity_json, the Markdown
report). This module re-exports every name of them, so `from calibrate import serving_fit` keeps
working.
"""

from __future__ import annotations

from calibrate.serving.fit import (  # noqa: F401 (private names: the tests use them)
    API_MAX_MS, API_STEP_MS, GRID_ITERATION_MS, GRID_PER_SEQUENCE_MS, MIN_BAND_N, OFF_SUPPORT_FACTOR, STEP_METRICS,
    TTFT_METRICS, _by, _heldout, _knee_summary, _load_support, _loss, _records, _shipped_request_overheads,
    _ttft_p50, band_pct, curve_knees, engine_set_of, fit_engine_params, fit_params, folds, grid, group_of,
    headline_loss, knee, metric_of, predict, region_of, residuals, run, summarize,
)
from calibrate.serving.engine_set import parse_engine_set  # noqa: F401 (`run(engine_set=)`, --engine-set)
from calibrate.serving.bands import _bands, nested_coverage  # noqa: F401 (the uncalibrated bands' coverage)
from calibrate.serving.fit import (  # noqa: F401 (the per-release front-end latency, stage 2)
    FRONT_END_RULE, FRONT_END_RULES, MIN_RELEASE_SOURCES, choose_front_end_rule, front_end_values, point_params,
    unloaded_records,
)
from calibrate.serving.replay import (  # noqa: F401 (private names: the tests use them)
    _TREE, Cache, _param_key, replay, tree_fingerprint,
)
from calibrate.serving.report import (  # noqa: F401 (private names: the tests use them)
    _excluded_by_curve, _fmt, _row_out, _rows_out, _section, band_records, bands_json, dumps_compact, fidelity_json,
    report_markdown, summary_lines,
)
from calibrate.serving.rows import (  # noqa: F401 (private names: the tests use them)
    CACHE_VERSION, CORPUS_DIR, KNEE_FACTOR, METRICS, MODEL_ALIASES,
    PUBLIC_DIR, ROOT, STATIC_BATCH, VLLM_LIKE, LoadPoint, _blank, _catalog_models, _client_kind, _hw_names,
    _lengths, _mean_lengths, _num, _overrides, curves, exclusion, load_corpus, load_points, model_id, prompt_cap,
    public_sources, release_of, stated_means,
)

__all__ = [
    "API_MAX_MS", "API_STEP_MS", "CACHE_VERSION", "CORPUS_DIR", "GRID_ITERATION_MS", "GRID_PER_SEQUENCE_MS",
    "KNEE_FACTOR", "METRICS", "MIN_BAND_N", "MODEL_ALIASES", "OFF_SUPPORT_FACTOR", "PUBLIC_DIR", "ROOT",
    "STATIC_BATCH", "STEP_METRICS", "TTFT_METRICS", "VLLM_LIKE", "Cache", "LoadPoint", "band_pct", "band_records",
    "bands_json", "curve_knees", "curves", "dumps_compact", "engine_set_of", "exclusion", "fidelity_json",
    "fit_engine_params", "fit_params", "parse_engine_set",
    "folds", "grid", "group_of", "headline_loss", "knee", "load_corpus", "load_points", "metric_of", "model_id",
    "nested_coverage", "predict", "prompt_cap", "public_sources", "region_of", "release_of", "replay",
    "report_markdown", "residuals", "run", "stated_means", "summarize", "summary_lines", "tree_fingerprint",
    "FRONT_END_RULE", "FRONT_END_RULES", "MIN_RELEASE_SOURCES", "choose_front_end_rule", "front_end_values",
    "point_params", "unloaded_records",
]
