"""The public-measurement fit, split by job; `calibrate/public_fit.py` describes it and re-exports it."""
