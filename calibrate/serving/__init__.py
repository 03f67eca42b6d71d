"""The serving-corpus replay, fit, cross-validation and report of issue 38, split by job (rows,
replay, fit, report); calibrate.serving_fit re-exports every name."""
