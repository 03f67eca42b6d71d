"""Measured against predicted: the simulation of a replayed trace, and the error of each metric.

`simulated_trace` turns what the engine really served into the simulator's input: the same
requests, arrival times and sessions, with the prompt lengths the server counted and the output
lengths it produced (a forced length can still end early, e.g. on an end-of-turn token the server
would not mask). `max_tokens` is the output length, because that is what the replay sent.

`compare` lines up the two summaries (both in `infersim run --json`'s schema) metric by metric:
error % = (predicted − measured) / measured × 100.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from calibrate.replay.records import COMPLETED, ReplayResult
from workloads.request import Request

# (label, summary path, scale to display unit, unit, target |error| % or None)
# Targets are the project's fidelity goals (issue 6): aggregate throughput within 5 %, TTFT p50,
# TPOT p50 and e2e p50 within 10 %.
METRICS: tuple[tuple[str, tuple[str, str], float, str, float | None], ...] = (
    ("throughput", ("throughput", "output_tok_s"), 1.0, "tok/s", 5.0),
    ("TTFT mean", ("ttft_s", "mean"), 1e3, "ms", None),
    ("TTFT p50", ("ttft_s", "p50"), 1e3, "ms", 10.0),
    ("TTFT p90", ("ttft_s", "p90"), 1e3, "ms", None),
    ("TPOT p50", ("tpot_s", "p50"), 1e3, "ms", 10.0),
    ("TPOT p90", ("tpot_s", "p90"), 1e3, "ms", None),
    ("ITL p50", ("itl_s", "p50"), 1e3, "ms", None),
    ("e2e p50", ("e2e_s", "p50"), 1e3, "ms", 10.0),
    ("e2e p90", ("e2e_s", "p90"), 1e3, "ms", None),
)


@dataclass(frozen=True)
class Row:
    """One metric: measured and predicted in display units, error in % (None if either is missing)."""

    metric: str
    unit: str
    measured: float | None
    predicted: float | None
    error_pct: float | None
    target_pct: float | None
    # the prediction on a machine `margin` faster and `margin` slower (run_validation's speed margin),
    # lowest and highest, in display units; None when not simulated
    band: tuple[float, float] | None = None

    @property
    def within_target(self) -> bool | None:
        if self.target_pct is None or self.error_pct is None:
            return None
        return abs(self.error_pct) <= self.target_pct

    def as_dict(self) -> dict:
        d = {"metric": self.metric, "unit": self.unit, "measured": self.measured,
             "predicted": self.predicted, "error_pct": self.error_pct, "target_pct": self.target_pct,
             "within_target": self.within_target}
        if self.band is not None:
            d["predicted_band"] = list(self.band)
        return d


def on_clock(requests: list[Request], speed: float) -> list[Request]:
    """The trace as a machine whose every step takes `speed` times as long sees it, on its own clock
    (one unit = `speed` seconds): arrival times divided by `speed`. Simulate this on the profile as
    it is, then convert each figure back with `at_speed`: that is the slower machine's prediction
    exactly (the simulator is time-homogeneous: tests/test_invariants.py)."""
    return [replace(r, arrival_s=r.arrival_s / speed) for r in requests]


def at_speed(value: float | None, unit: str, speed: float) -> float | None:
    """A figure simulated with `on_clock(trace, speed)`, back in seconds: rates (tok/s) divided by
    `speed`, times multiplied by it."""
    if value is None:
        return None
    return value / speed if unit == "tok/s" else value * speed


def _get(summary: dict, path: tuple[str, str]) -> float | None:
    v = (summary.get(path[0]) or {}).get(path[1])
    return None if v is None else float(v)


def compare(measured: dict, predicted: dict) -> list[Row]:
    """Metric-by-metric comparison of two summaries in `infersim run --json`'s schema."""
    rows = []
    for label, path, scale, unit, target in METRICS:
        m, p = _get(measured, path), _get(predicted, path)
        err = None if m is None or p is None or m == 0 else (p - m) / m * 100.0
        rows.append(Row(label, unit, None if m is None else m * scale, None if p is None else p * scale,
                        err, target))
    return rows


def simulated_trace(result: ReplayResult, requests: list[Request]) -> list[Request]:
    """The trace to simulate: every request the engine completed, at its measured lengths."""
    done = {r.id: r for r in result.records if r.status == COMPLETED}
    out = []
    for req in requests:
        rec = done.get(req.id)
        if rec is None:
            continue
        n_out = max(rec.output_tokens, 1)
        out.append(replace(req, prompt_tokens=rec.prompt_tokens, output_tokens=n_out, max_tokens=n_out))
    return out


def cdf_html(measured, predicted, path: str | Path, title: str) -> Path:
    """Self-contained HTML (plotly.js inlined) of the CDFs of TTFT and e2e latency, measured vs predicted.

    `measured`, `predicted`: requests.csv tables (pandas DataFrames with `ttft_s`, `e2e_s`, `status`).
    """
    import numpy as np
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("TTFT", "end-to-end latency"))
    for col, column in enumerate(("ttft_s", "e2e_s"), start=1):
        for name, df, dash in (("measured", measured, "solid"), ("predicted", predicted, "dash")):
            ok = df[df["status"] == COMPLETED] if "status" in df else df
            x = np.sort(ok[column].dropna().to_numpy(dtype=float)) * 1e3
            y = np.arange(1, len(x) + 1) / max(len(x), 1)
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=name, line={"dash": dash, "shape": "hv"},
                                     showlegend=col == 1,
                                     legendgroup=name), row=1, col=col)
        fig.update_xaxes(title_text="ms", row=1, col=col)
        fig.update_yaxes(title_text="fraction of requests", range=[0, 1], row=1, col=col)
    fig.update_layout(title=title, template="plotly_white")
    from sim.files import atomic_write_with

    path = Path(path)
    atomic_write_with(path, lambda p: fig.write_html(p, include_plotlyjs=True, full_html=True))  # inlined: opens offline
    return path
