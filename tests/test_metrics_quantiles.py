"""The exact ITL quantiles of arithmetic-progression records (sim.engine.metrics.weighted_ap_quantiles)
equal the inverted-CDF quantiles of the expanded multiset, with and without the sampled starting
bracket that large record sets use."""

from __future__ import annotations

import numpy as np
import pytest

from sim.engine import metrics
from sim.engine.metrics import weighted_ap_quantiles

QS = (0.0, 0.01, 0.5, 0.9, 0.99, 1.0)


def _expanded_quantiles(a, d, n, w, qs):
    """Every element a + j*d (the same float expression the counts use), `w` copies each, sorted;
    the smallest one whose cumulative count reaches q x total."""
    vals = np.concatenate([ai + np.arange(ni) * di for ai, di, ni in zip(a, d, n)])
    reps = np.repeat(w, n)
    order = np.argsort(vals, kind="stable")
    vals, cum = vals[order], np.cumsum(reps[order])
    total = cum[-1]
    return [float(vals[np.searchsorted(cum, max(q * total, 1e-300), side="left")]) for q in qs]


def _records(rng, m, kind):
    n = rng.integers(1, 6, m)
    w = rng.integers(1, 4, m).astype(float)
    if kind == "spread":
        a, d = rng.lognormal(-3.5, 0.5, m), rng.uniform(0, 1e-4, m)
    elif kind == "ties":  # many equal values: the quantile sits on a long run of ties
        a, d = rng.choice([0.02, 0.025, 0.03], m), np.zeros(m)
    elif kind == "periodic":  # a pattern with the sample's stride: the sample is biased
        a = np.where(np.arange(m) % 16 == 0, 5.0, 0.01) + rng.uniform(0, 1e-3, m)
        d = rng.uniform(0, 1e-5, m)
    else:  # bimodal with a few huge gaps (prefill stalls)
        a = np.where(rng.random(m) < 0.02, rng.uniform(0.5, 2.0, m), rng.uniform(0.01, 0.02, m))
        d = rng.uniform(0, 2e-5, m)
    return a, d, n, w


@pytest.mark.parametrize("kind", ["spread", "ties", "periodic", "stalls"])
@pytest.mark.parametrize("m", [200, 40_000])  # below and above the sampled-bracket threshold
def test_quantiles_equal_the_expanded_multiset(kind, m):
    assert (m >= metrics.BRACKET_SAMPLE_FROM) == (m == 40_000)
    rng = np.random.default_rng(7 + m)
    a, d, n, w = _records(rng, m, kind)
    got = weighted_ap_quantiles(a, d, n, w, QS)
    assert got == _expanded_quantiles(a, d, n, w, QS)


def test_the_sampled_bracket_does_not_change_the_result(monkeypatch):
    rng = np.random.default_rng(3)
    a, d, n, w = _records(rng, 50_000, "stalls")
    with_sample = weighted_ap_quantiles(a, d, n, w, QS)
    monkeypatch.setattr(metrics, "BRACKET_SAMPLE_FROM", 10**12)
    assert weighted_ap_quantiles(a, d, n, w, QS) == with_sample
