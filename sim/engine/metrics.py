"""What serving engineers measure, recorded compactly and summarised as vLLM's benchmark_serving does.

Definitions (vllm/benchmarks/serve.py, `calculate_metrics`):
- TTFT = first token time - arrival time.
- TPOT = (e2e latency - TTFT) / (output tokens - 1), over requests with more than one output token.
- ITL = the gaps between consecutive tokens of a request, pooled over all requests.
- E2E = finish time - arrival time. Duration = first arrival to last completion.
- Decode tokens/s per request = (output tokens - 1) / (e2e - TTFT) = 1 / TPOT.
TTFT, TPOT and E2E percentiles are `numpy.percentile`'s (linear interpolation, as vLLM uses), computed bit for bit
by `_percentiles` (which does not import `numpy.ma`).
Throughput counts completed requests over the duration. Batch size = sequences (prefill chunks +
decodes) per engine iteration, averaged over iterations (a fast-forwarded run of k steps counts k
times), not over time. KV peaks are fractions of the cache's token capacity: used = tokens
written, reserved = blocks handed out (their difference is the allocator's waste).

ITL without per-token arrays: a fast-forwarded run of k decode steps for a batch of B sequences
produces B gaps per step, and step j lasts t_first + j * delta (the step time grows linearly with
the context: one more token of KV per sequence per step). Each run is stored as one record
(first value, delta, steps, weight B), with t_first the exact first step and delta chosen so the
record sums to the run's exact closed-form total; percentiles are exact order statistics of that
pooled multiset (the "inverted CDF" definition: the smallest gap g with at least q of all gaps
<= g), found by bisection on the value without expanding the records (`weighted_ap_quantiles`).
The linear form is exact while a run stays in one roofline regime; a run that crosses from
memory- to compute-bound (or past a sliding window) mid-way is represented within its
first-to-last step spread. A sequence that missed iterations (a prefill-only iteration, a
preemption) gets its real, longer gap as a record of its own.
"""

from __future__ import annotations

import math
from array import array
from typing import TYPE_CHECKING

import numpy as np

from sim.engine.verdict import steady_state_verdict

if TYPE_CHECKING:  # pandas (a third of a second to import) loads only when a table is asked for
    import pandas as pd

STATUS_PENDING, STATUS_COMPLETED, STATUS_REJECTED = 0, 1, 2
STATUS_NAMES = {STATUS_PENDING: "pending", STATUS_COMPLETED: "completed", STATUS_REJECTED: "rejected"}

REQUEST_COLUMNS = [
    "id", "arrival_s", "scheduled_s", "first_token_s", "finish_s", "prompt_tokens", "output_tokens",
    "ttft_s", "tpot_s", "e2e_s", "preemptions", "status", "reason",
]


class _Grow:
    """A growable numpy column (amortised doubling), for millions of rows without Python objects."""

    __slots__ = ("a",)

    def __init__(self, dtype, fill=0) -> None:
        self.a = np.full(1024, fill, dtype=dtype)

    def ensure(self, n: int, fill=0) -> None:
        if n > len(self.a):
            new = np.full(max(n, 2 * len(self.a)), fill, dtype=self.a.dtype)
            new[: len(self.a)] = self.a
            self.a = new


class RequestLog:
    """Per-request timestamps and counts, one row per request in arrival order."""

    def __init__(self) -> None:
        self.n = 0
        self.ids: list[str] = []
        self._f = {k: _Grow(np.float64, np.nan) for k in ("arrival_s", "scheduled_s", "first_token_s", "finish_s")}
        self._i = {k: _Grow(np.int64) for k in ("prompt_tokens", "output_tokens", "preemptions", "status", "reason")}
        # column arrays, refreshed on growth (the replica writes into them directly)
        self.arrival_s = self.scheduled_s = self.first_token_s = self.finish_s = None
        self.prompt_tokens = self.output_tokens = self.preemptions = self.status = self.reason = None
        self.reasons: list[str] = [""]
        self._reason_index: dict[str, int] = {"": 0}
        self._bind()

    def _bind(self) -> None:
        for k, g in self._f.items():
            setattr(self, k, g.a)
        for k, g in self._i.items():
            setattr(self, k, g.a)

    def resize(self, n: int) -> None:
        """Hold n rows (the new ones zero; `sim.cluster.replicas.merge_logs` then writes every column)."""
        if n:
            self.add("", 0.0, 0)
            for g in (*self._f.values(), *self._i.values()):
                g.ensure(n, 0)
            self._bind()

    def add(self, rid: str, arrival_s: float, prompt_tokens: int) -> int:
        """A new row for an arrived request; returns its index."""
        row = self.n
        if row >= len(self.arrival_s):
            for g in self._f.values():
                g.ensure(row + 1, np.nan)
            for g in self._i.values():
                g.ensure(row + 1, 0)
            self._bind()
        self.ids.append(rid)
        self.arrival_s[row] = arrival_s
        self.prompt_tokens[row] = prompt_tokens
        self.n = row + 1
        return row

    def reason_code(self, reason: str) -> int:
        code = self._reason_index.get(reason)
        if code is None:
            code = self._reason_index[reason] = len(self.reasons)
            self.reasons.append(reason)
        return code

    def reject(self, row: int, now_s: float, reason: str) -> None:
        self.status[row] = STATUS_REJECTED
        self.finish_s[row] = now_s
        self.reason[row] = self.reason_code(reason)

    def send_order(self) -> slice | np.ndarray:
        """The rows in send order (`arrival_s`, stable): a slice of all rows when they are logged in that order (one
        constant front-end delay), else the permutation (front_jitter lets a request overtake another). The table
        and the summary read the rows in this order, so their figures do not depend on the order requests reached
        the replica (a float sum does, in its last bit)."""
        n = self.n
        arr = self.arrival_s[:n]
        if n < 2 or bool(np.all(arr[1:] >= arr[:-1])):  # logged in send order: a stable sort is the identity
            return slice(0, n)
        return np.argsort(arr, kind="stable")

    def frame(self) -> pd.DataFrame:
        """The requests.csv table (columns `REQUEST_COLUMNS`), one row per request in send order (`arrival_s`,
        stable): the rows are logged as requests reach the replica, which with a per-request front-end delay
        (EngineConfig.front_jitter) can differ from the order they were sent in; a cluster's merged log is in send
        order too (sim.cluster.replicas.merge_logs), so one replica and a cluster of one give the same table."""
        import pandas as pd

        n, rows = self.n, self.send_order()
        arr, ft, fin = self.arrival_s[rows], self.first_token_s[rows], self.finish_s[rows]
        out = self.output_tokens[rows]
        status = self.status[rows]
        done = status == STATUS_COMPLETED
        ttft = np.where(done, ft - arr, np.nan)
        e2e = np.where(done, fin - arr, np.nan)
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(done & (out > 1), (e2e - ttft) / (out - 1), np.nan)
        reasons = np.array(self.reasons, dtype=object)
        ids = self.ids[:n] if isinstance(rows, slice) else [self.ids[i] for i in rows]
        return pd.DataFrame({
            "id": ids,
            "arrival_s": arr,
            "scheduled_s": self.scheduled_s[rows],
            "first_token_s": ft,
            "finish_s": fin,
            "prompt_tokens": self.prompt_tokens[rows],
            "output_tokens": out,
            "ttft_s": ttft,
            "tpot_s": tpot,
            "e2e_s": e2e,
            "preemptions": self.preemptions[rows],
            "status": np.array([STATUS_NAMES[STATUS_PENDING], STATUS_NAMES[STATUS_COMPLETED],
                                STATUS_NAMES[STATUS_REJECTED]], dtype=object)[status],
            "reason": reasons[self.reason[rows]],
        }, columns=REQUEST_COLUMNS)


class GapLog:
    """Inter-token gaps as arithmetic-progression records: values first + j*delta, j < steps,
    each with `weight` copies (the batch size)."""

    def __init__(self) -> None:
        self.first = array("d")
        self.delta = array("d")
        self.steps = array("q")
        self.weight = array("q")

    def add(self, first_s: float, delta_s: float, steps: int, weight: int) -> None:
        if steps > 0 and weight > 0:
            self.first.append(first_s)
            self.delta.append(delta_s)
            self.steps.append(steps)
            self.weight.append(weight)

    def add_singles(self, values: np.ndarray) -> None:
        """One record per value (delta 0, one step, weight 1), in order: `add(v, 0.0, 1, 1)` for each v
        of the float64 array `values`, appended as whole buffers (no per-value Python call)."""
        m = len(values)
        if m:
            self.first.frombytes(np.ascontiguousarray(values, dtype=np.float64).tobytes())
            self.delta.frombytes(bytes(8 * m))  # +0.0 is all zero bits
            ones = np.ones(m, dtype=np.int64).tobytes()
            self.steps.frombytes(ones)
            self.weight.frombytes(ones)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return (np.frombuffer(self.first, dtype=np.float64), np.frombuffer(self.delta, dtype=np.float64),
                np.frombuffer(self.steps, dtype=np.int64), np.frombuffer(self.weight, dtype=np.int64))


def _count_le(x: float, a: np.ndarray, d: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Per record, how many of a + j*d (0 <= j < n, d >= 0) are <= x."""
    with np.errstate(divide="ignore", invalid="ignore"):
        k = np.where(d > 0, np.floor((x - a) / np.where(d > 0, d, 1.0)) + 1, np.where(a <= x, n, 0))
    k = np.clip(k, 0, n)
    # floor() of a ratio can be one off at exact ties; fix with a direct comparison.
    over = (k > 0) & (a + (k - 1) * d > x)
    k = np.where(over, k - 1, k)
    under = (k < n) & (a + k * d <= x)
    return np.where(under, k + 1, k)


# the narrower starting bracket of weighted_ap_quantiles: from this many records on, a sample of
# about BRACKET_SAMPLE_RECORDS of them, quantiles BRACKET_MARGIN either side (speed only: any
# confirmed bracket gives the same result)
BRACKET_SAMPLE_FROM = 16384
BRACKET_SAMPLE_RECORDS = 1024
BRACKET_MARGIN = 0.01


def weighted_ap_quantiles(first, delta, steps, weight, qs) -> list[float]:
    """Exact quantiles (inverted CDF) of the multiset {first_r + j*delta_r : j < steps_r, weight_r copies}.

    For each q, the smallest element x with count(x) >= q * total, where
    count(x) = sum_r weight_r * #{j : first_r + j*delta_r <= x}. Bisection on the value keeps
    count(lo) < target <= count(hi) until no float lies between lo and hi, so x = hi exactly.
    Records wholly below the bracket are folded into a constant and records wholly above it
    dropped, so each step only touches the few records straddling it.

    With many records the bisection starts from a narrower bracket: the same quantiles, 1 point
    either side, of every k-th record (about 1,000 of them), each end kept only if the full count
    confirms it (count(lo) < target <= count(hi)). Any bracket that satisfies that invariant ends on
    the same float, so the result does not depend on the sample; it saves the first full passes
    over a million-request run's records.
    """
    a = np.asarray(first, dtype=np.float64)
    d = np.asarray(delta, dtype=np.float64)
    n = np.asarray(steps, dtype=np.int64)
    w = np.asarray(weight, dtype=np.float64)
    neg = d < 0  # normalise to non-decreasing progressions
    if neg.any():
        a = np.where(neg, a + d * (n - 1), a)
        d = np.abs(d)
    total = float((n * w).sum())
    if total <= 0:
        return [math.nan for _ in qs]
    top = a + d * (n - 1)
    lo0 = float(np.nextafter(a.min(), -np.inf))  # count(lo0) = 0 < target
    hi0 = float(top.max())  # count(hi0) = total >= target
    hints = None
    if len(a) >= BRACKET_SAMPLE_FROM:
        k = len(a) // BRACKET_SAMPLE_RECORDS
        around = [x for q in qs for x in (max(q - BRACKET_MARGIN, 0.0), min(q + BRACKET_MARGIN, 1.0))]
        hints = weighted_ap_quantiles(a[::k], d[::k], n[::k], w[::k], around)
    out = []
    for i, q in enumerate(qs):
        target = max(q * total, 1e-300)
        lo, hi = lo0, hi0
        if hints is not None:
            x_lo, x_hi = hints[2 * i], hints[2 * i + 1]
            if lo0 < x_lo < hi0 and float((w * _count_le(x_lo, a, d, n)).sum()) < target:
                lo = x_lo
            if lo < x_hi < hi0 and float((w * _count_le(x_hi, a, d, n)).sum()) >= target:
                hi = x_hi
        out.append(_bisect(a, d, n, w, top, target, lo, hi))
    return out


def _bisect(a, d, n, w, top, target: float, lo: float, hi: float) -> float:
    """The smallest float x in (lo, hi] with count(x) >= target, given count(lo) < target <= count(hi)."""
    base = 0.0
    aa, dd, nn, ww, tt = a, d, n, w, top
    while True:
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if base + float((ww * _count_le(mid, aa, dd, nn)).sum()) >= target:
            hi = mid
        else:
            lo = mid
        below = tt <= lo
        if below.any():
            base += float((ww[below] * nn[below]).sum())
        keep = ~below & (aa <= hi)
        if not keep.all():
            aa, dd, nn, ww, tt = aa[keep], dd[keep], nn[keep], ww[keep], tt[keep]
    return hi


def weighted_ap_mean(first, delta, steps, weight) -> float:
    """Mean of the same multiset: sum_r w_r * (n_r * a_r + d_r * n_r (n_r - 1) / 2) / sum_r w_r n_r."""
    a = np.asarray(first, dtype=np.float64)
    d = np.asarray(delta, dtype=np.float64)
    n = np.asarray(steps, dtype=np.float64)
    w = np.asarray(weight, dtype=np.float64)
    total = float((n * w).sum())
    if total <= 0:
        return math.nan
    return float((w * (n * a + d * n * (n - 1) / 2)).sum() / total)


class IterationLog:
    """One row per engine event: a prefill/mixed iteration, or a fast-forwarded run of `steps`
    identical-shape decode iterations."""

    COLUMNS = ("start_s", "duration_s", "steps", "prefill_seqs", "prefill_tokens", "decode_seqs",
               "kv_used_tokens", "kv_reserved_tokens", "waiting", "running")

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.start_s = array("d")
        self.duration_s = array("d")
        self._ints = array("q")  # the integer columns, row-interleaved (one extend per event)

    def add(self, start_s, duration_s, steps, prefill_seqs, prefill_tokens, decode_seqs, used, reserved, waiting, running) -> None:
        self.start_s.append(start_s)
        self.duration_s.append(duration_s)
        self._ints.extend((steps, prefill_seqs, prefill_tokens, decode_seqs, used, reserved, waiting, running))

    @property
    def ints(self) -> dict[str, np.ndarray]:
        """The integer columns by name (strided views of the log, no copies)."""
        rows = np.frombuffer(self._ints, dtype=np.int64).reshape(-1, len(self.COLUMNS) - 2)
        return {c: rows[:, j] for j, c in enumerate(self.COLUMNS[2:])}

    def frame(self) -> pd.DataFrame:
        import pandas as pd

        data = {"start_s": np.frombuffer(self.start_s, dtype=np.float64),
                "duration_s": np.frombuffer(self.duration_s, dtype=np.float64), **self.ints}
        return pd.DataFrame(data, columns=list(self.COLUMNS))


def _num(x: float) -> float | None:
    """JSON-safe float: None for an undefined statistic (no data), never NaN."""
    x = float(x)
    return None if math.isnan(x) or math.isinf(x) else x


def _percentiles(values: np.ndarray, percentiles) -> list[float]:
    """`np.percentile(values, percentiles)` (method 'linear') of a non-empty 1-D float64 array, bit
    for bit: numpy's own index arithmetic and `_lerp` (numpy/lib/_function_base_impl.py,
    `_quantile`, `_get_indexes`, `_get_gamma`, `_lerp`) on the sorted values, in double precision
    as numpy computes them. Written out because `np.percentile` imports `numpy.ma` (through
    `np.unique`), ~6 ms of every run's start-up. With a NaN among the values, numpy itself."""
    x = np.sort(values)
    if x[-1] != x[-1]:  # NaN sorts last: numpy's NaN rules
        return [float(v) for v in np.percentile(values, percentiles)]
    return sorted_percentiles(x, percentiles)


def sorted_percentiles(x: np.ndarray, percentiles) -> list[float]:
    """`_percentiles` of values already sorted (a non-empty 1-D float64 array without NaN): one sort
    serves every percentile (and a median) of the same values."""
    n = len(x)
    out = []
    for p in percentiles:
        vi = (n - 1) * (p / 100)  # virtual index: (n - 1) * q, q = p / 100 (both correctly rounded doubles)
        if vi >= n - 1:  # above the last index: both neighbours are the last value
            i = j = -1
        else:
            i = math.floor(vi)
            j = i + 1
        t = vi - i  # gamma (numpy subtracts the clamped integer index too)
        a = float(x[i])
        b = float(x[j])
        d = b - a
        out.append(b - d * (1 - t) if t >= 0.5 else a + d * t)
    return out


def _stats(values: np.ndarray, percentiles=(50, 90, 99)) -> dict[str, float | None]:
    if not len(values):
        return {"mean": None, **{f"p{p}": None for p in percentiles}}
    pv = _percentiles(values, percentiles)
    return {"mean": _num(values.mean()), **{f"p{p}": _num(v) for p, v in zip(percentiles, pv)}}


#: The percentile a run's verdict judges: the highest one the summary reports.
VERDICT_PERCENTILE = 0.99


def summarize(config: dict, log: RequestLog, gaps: GapLog, *, kv_capacity_tokens: int, peak_used_tokens: int,
              peak_reserved_tokens: int, preemptions: int, batch_steps: int, batch_seq_steps: int,
              batch_max: int) -> dict:
    """The JSON contract of `infersim run --json` (key order fixed)."""
    n, rows = log.n, log.send_order()
    status = log.status[rows]
    done = status == STATUS_COMPLETED
    arr = log.arrival_s[rows]
    fin = log.finish_s[rows][done]
    out = log.output_tokens[rows][done]
    prompt = log.prompt_tokens[rows][done]
    ttft = log.first_token_s[rows][done] - arr[done]
    e2e = fin - arr[done]
    multi = out > 1
    tpot = (e2e[multi] - ttft[multi]) / (out[multi] - 1)
    with np.errstate(divide="ignore"):
        decode_rate = (out[multi] - 1) / (e2e[multi] - ttft[multi])
    decode_rate = decode_rate[np.isfinite(decode_rate)]
    duration = float(fin.max() - arr.min()) if done.any() else 0.0
    per_s = (lambda x: x / duration) if duration > 0 else (lambda x: 0.0)
    a, d, k, w = gaps.arrays()
    itl_q = weighted_ap_quantiles(a, d, k, w, (0.5, 0.9, 0.99)) if len(a) else [math.nan] * 3
    cap = max(kv_capacity_tokens, 1)
    return {
        "config": config,
        "requests": {"total": int(n), "completed": int(done.sum()), "rejected": int((status == STATUS_REJECTED).sum())},
        "duration_s": duration,
        "throughput": {
            "output_tok_s": per_s(float(out.sum())),
            "total_tok_s": per_s(float(out.sum() + prompt.sum())),
            "requests_per_s": per_s(float(done.sum())),
        },
        "ttft_s": _stats(ttft),
        "tpot_s": _stats(tpot),
        "itl_s": {"mean": _num(weighted_ap_mean(a, d, k, w)) if len(a) else None,
                  "p50": _num(itl_q[0]), "p90": _num(itl_q[1]), "p99": _num(itl_q[2])},
        "e2e_s": _stats(e2e),
        "decode_tok_s_per_request": {
            "mean": _num(decode_rate.mean()) if len(decode_rate) else None,
            "p50": _num(_percentiles(decode_rate, (50,))[0]) if len(decode_rate) else None,
        },
        "kv": {
            "capacity_tokens": int(kv_capacity_tokens),
            "peak_used_fraction": peak_used_tokens / cap,
            "peak_reserved_fraction": peak_reserved_tokens / cap,
            "preemptions": int(preemptions),
        },
        "batch_size": {
            "mean": batch_seq_steps / batch_steps if batch_steps else 0.0,
            "max": int(batch_max),
        },
        # stable / overloaded from t = X / too short / too few requests for p99 (sim.engine.verdict)
        "verdict": steady_state_verdict(arr, log.finish_s[rows], done, percentile=VERDICT_PERCENTILE, e2e_s=e2e),
    }
