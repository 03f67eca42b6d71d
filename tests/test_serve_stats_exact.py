"""The client statistics of `sim.bench.serve` computed without per-request numpy calls give numpy's own
per-request results bit for bit: `_stat` (one sort for median and percentiles) against np.mean / np.median /
np.std / np.percentile, `_itls` (every request at once) against one request at a time."""

import numpy as np

from sim.bench.serve import _itls, _stat


def _stat_numpy(values, percentiles):
    v = np.asarray(values, dtype=np.float64) if len(values) else np.zeros(1)
    return (float(np.mean(v) * 1000), float(np.median(v) * 1000), float(np.std(v) * 1000),
            [(p, float(np.percentile(v, p) * 1000)) for p in percentiles])


def _itls_one(ends, first, last, out):
    if out <= 1:
        return np.zeros(0)
    lo, hi = np.searchsorted(ends, first, side="right"), np.searchsorted(ends, last, side="right")
    times = ends[lo:hi]
    if len(times) == out - 1 and times[-1] == last:
        return np.diff(np.concatenate(([first], times)))
    return np.full(out - 1, (last - first) / (out - 1))


def test_stat_matches_numpy_bit_for_bit():
    rng = np.random.default_rng(0)
    for i in range(600):
        n = int(rng.integers(0, 200))
        v = rng.lognormal(-3, 1, n) if i % 2 else rng.integers(0, 4, n) * 0.0125  # ties too
        for ps in ((50.0, 90.0, 95.0, 99.0), (50, 90, 99), (0.0, 100.0, 33.3)):
            assert repr(_stat(v, ps)) == repr(_stat_numpy(v, ps))
    assert repr(_stat([1.0, float("nan")], (50.0,))) == repr(_stat_numpy([1.0, float("nan")], (50.0,)))


def test_itls_match_one_request_at_a_time():
    rng = np.random.default_rng(1)
    exact_seen = 0
    for _ in range(300):
        L = int(rng.integers(0, 200))
        ends = np.sort(rng.random(L) * 10)
        n = int(rng.integers(0, 40))
        first, last = rng.random(n) * 10, np.zeros(n)
        out, ok = rng.integers(0, 30, n), rng.random(n) < 0.9
        for i in range(n):
            if L and rng.random() < 0.7:  # streamed at step ends: out - 1 of them after the first token
                s = int(rng.integers(0, L))
                e = min(L - 1, s + int(rng.integers(0, 30)))
                first[i], last[i], out[i] = ends[s], ends[e], e - s + 1 if rng.random() < 0.7 else out[i]
                exact_seen += e > s
            else:
                last[i] = first[i] + rng.random()
        first[~ok] = last[~ok] = np.nan
        got = _itls(ends, first, last, out.astype(np.int64), ok)
        for i in range(n):
            want = _itls_one(ends, first[i], last[i], int(out[i])) if ok[i] else np.zeros(0)
            assert got[i].dtype == want.dtype and got[i].tobytes() == want.tobytes()
    assert exact_seen > 100
