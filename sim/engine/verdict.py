"""Whether a run's figures describe a steady state: stable, overloaded, too short, or too few requests.

A replay of a finite trace always ends and always prints percentiles, even when arrivals outran the
deployment (the queue grew all along and the "median TTFT" is how long the trace happened to last)
or when the trace was too short or too small for the percentile printed. `steady_state_verdict`
says which, from the per-request records alone (arrival, leaving the system, status), so `run`,
`sweep` and `plan` judge the same way. Criteria, in order of precedence:

1. **Overloaded from t = X s.** N(t), the requests in the system (arrived, not yet completed or
   rejected), sampled just after each arrival. Over the second half of the arrival window
   [t_mid, t_last] (the first half is the warm-up from an empty system), the least-squares slope
   g of N against time is the rate at which arrivals outrun completions: offered rate lambda
   (arrivals in the half / its length) minus served rate mu = lambda - g (Little's book-keeping:
   dN/dt = arrivals/s - departures/s). (`served_rps`, printed beside it, is the run's completions
   per second from the first arrival to the last completion: while a backlog lasts, what the
   deployment can serve.) The run is overloaded when g > `OVERLOAD_TOLERANCE` x lambda
   (completions fall more than 5% short of arrivals) and the queue grew by at least
   `MIN_GROWTH_REQUESTS` over the half (a couple of requests is noise, not a trend). A stable queue
   has no trend: it fluctuates around lambda x (time in system). The onset X is the last arrival
   instant at which N(t) was still at its starting level (the median of N over the first 20
   arrivals, or the first 10% if fewer): from then on the backlog never emptied back. An overload
   that drains before the trace ends (a burst) is not flagged: it shows in the latencies, and the
   second half has no trend; a burst that has not drained by the last arrival can be. On a short
   trace the fill-up of an empty system can look like growth, so a short trace says so beside
   an overload (criterion 2 is listed too).
2. **Too short to reach steady state.** A system that starts empty needs several times the time a
   request spends in it before its queue forgets the empty start; the figures are steady-state
   figures only if the arrival window is at least `STEADY_STATE_SPANS` (10) median end-to-end
   latencies long (the warm-up is then at most a tenth of it), and it holds at least
   `MIN_TREND_REQUESTS` arrivals (below that no trend can be judged).
3. **Too few requests for pQQ.** The q-quantile of n samples rests on the n(1 - q) samples above
   it; with fewer than 10 of them it is one of the few largest values and moves with each one.
   A percentile is supported from n >= 10 / (1 - q) completed requests (p90: 100, p99: 1,000).
   `run` judges p99 (the highest percentile it prints); `sweep` and `plan` judge p90 (the
   percentile their tables and SLOs name).

Otherwise the run is **stable**. Closed-loop runs (N clients) cannot be overloaded (each client
waits for its answer), so only 2 and 3 apply to them in practice. How sharp criterion 1 is on M/M/4
queues of known utilisation is measured in docs/simulating.md.
"""

from __future__ import annotations

import math

import numpy as np

#: Completions may fall short of arrivals by this fraction of the offered rate before the run is
#: called overloaded (the trend of a stable queue over a finite window is not exactly zero).
OVERLOAD_TOLERANCE = 0.05
#: ... and the queue must have grown by at least this many requests over the second half.
MIN_GROWTH_REQUESTS = 5.0
#: Arrival window needed, in median end-to-end latencies, for the empty start to be forgotten.
STEADY_STATE_SPANS = 10.0
#: Fewest arrivals over which a trend (and a steady state) is judged at all.
MIN_TREND_REQUESTS = 40
#: Arrivals whose in-system count sets the starting level the onset of an overload is measured from.
HEAD_REQUESTS = 20
#: Samples needed beyond a percentile: n >= TAIL_SAMPLES / (1 - q).
TAIL_SAMPLES = 10.0

STATES = ("stable", "overloaded", "too_short", "too_few_requests")


def min_requests_for(q: float) -> int:
    """Completed requests that support the q-quantile (q in (0, 1)): ceil(10 / (1 - q))."""
    return int(math.ceil(TAIL_SAMPLES / (1.0 - q) - 1e-9))


def percentile_name(q: float) -> str:
    return f"p{100 * q:g}"


def _slope(t: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of y against t."""
    tc = t - t.mean()
    den = float((tc * tc).sum())
    return float((tc * (y - y.mean())).sum() / den) if den > 0 else 0.0


def steady_state_verdict(arrival_s, finish_s, status_completed, *, percentile: float = 0.99,
                         e2e_s=None) -> dict:
    """The verdict of one run (criteria in the module docstring).

    `arrival_s`: every request's arrival; `finish_s`: when it left the system (completed or
    rejected; NaN if still there when the run ended); `status_completed`: boolean mask of the
    completed ones; `e2e_s`: their end-to-end latencies (default finish - arrival of the completed).
    Returns a JSON-ready dict: `state` (one of STATES, the first that applies), `issues` (every
    state that applies, in precedence order), `text` (what the tables print), and the figures
    behind it.
    """
    arr = np.asarray(arrival_s, dtype=np.float64)
    fin = np.asarray(finish_s, dtype=np.float64)
    done = np.asarray(status_completed, dtype=bool)
    n = len(arr)
    completed = int(done.sum())
    if e2e_s is None:
        e2e_s = (fin - arr)[done]
    e2e = np.asarray(e2e_s, dtype=np.float64)
    e2e = e2e[np.isfinite(e2e)]
    need = min_requests_for(percentile)
    out: dict = {"state": "stable", "issues": [], "text": "stable", "percentile": percentile,
                 "min_completed_for_percentile": need, "completed": completed,
                 "overloaded_from_s": None, "offered_rps": None, "served_rps": None,
                 "in_system_growth_rps": None, "arrival_window_s": None, "median_e2e_s": None,
                 "window_over_e2e": None}
    issues: list[str] = []
    texts: list[str] = []
    if n:
        order = np.argsort(arr, kind="stable")
        t = arr[order]
        t0, t1 = float(t[0]), float(t[-1])
        span = t1 - t0
        out["arrival_window_s"] = span
        leave = np.sort(np.where(np.isnan(fin), np.inf, fin))
        # N just after each arrival: arrivals so far (ties included) minus departures so far
        arrived = np.searchsorted(t, t, side="right")
        left = np.searchsorted(leave, t, side="right")
        in_system = (arrived - left).astype(np.float64)
        med_e2e = float(np.median(e2e)) if len(e2e) else None
        out["median_e2e_s"] = med_e2e
        if med_e2e and med_e2e > 0:
            out["window_over_e2e"] = span / med_e2e
        ends = fin[done & np.isfinite(fin)]
        if len(ends) and ends.max() > t0:  # completions per second from the first arrival to the last completion
            out["served_rps"] = len(ends) / float(ends.max() - t0)
        half = t >= t0 + span / 2
        if span > 0 and half.sum() >= MIN_TREND_REQUESTS // 2:
            th, nh = t[half], in_system[half]
            half_span = float(th[-1] - th[0])
            if half_span > 0:
                offered = (len(th) - 1) / half_span
                growth = _slope(th, nh)
                out.update(offered_rps=offered, in_system_growth_rps=growth)
                if growth > OVERLOAD_TOLERANCE * offered and growth * half_span >= MIN_GROWTH_REQUESTS:
                    head = in_system[: max(1, min(HEAD_REQUESTS, len(t) // 10))]
                    base = float(np.median(head))
                    settled = np.nonzero(in_system <= base)[0]
                    onset = float(t[settled[-1]]) if len(settled) else t0
                    out["overloaded_from_s"] = onset
                    issues.append("overloaded")
                    served = out["served_rps"]
                    texts.append(f"overloaded from t = {onset:.4g} s: arrivals {offered:.4g} req/s, served "
                                 f"{served:.4g} req/s (queue +{growth:.3g} req/s)")
        short = n < MIN_TREND_REQUESTS or (med_e2e is not None and span < STEADY_STATE_SPANS * med_e2e)
        if short:  # said beside an overload too: on a short trace the warm-up can look like one
            issues.append("too_short")
            if n < MIN_TREND_REQUESTS:
                texts.append(f"too short to reach steady state ({n} requests < {MIN_TREND_REQUESTS})")
            else:
                texts.append(f"too short to reach steady state (arrivals span {span:.3g} s < "
                             f"{STEADY_STATE_SPANS:g} x median E2E {med_e2e:.3g} s)")
    if completed < need:
        issues.append("too_few_requests")
        texts.append(f"too few requests for {percentile_name(percentile)} ({completed:,} completed < {need:,})")
    if issues:
        out.update(state=issues[0], issues=issues, text="; ".join(texts))
    return out


def short_text(verdict: dict | None) -> str:
    """A table cell: 'stable', 'overloaded @12.3s', 'too short', 'few for p99' (joined by ', ')."""
    if not verdict:
        return "-"
    words = []
    for s in verdict.get("issues") or []:
        if s == "overloaded":
            words.append(f"overloaded @{verdict['overloaded_from_s']:.3g}s")
        elif s == "too_short":
            words.append("too short")
        elif s == "too_few_requests":
            words.append(f"few for {percentile_name(verdict['percentile'])}")
    return ", ".join(words) or "stable"


def verdict_of_requests(requests, percentile: float) -> dict:
    """`steady_state_verdict` of a requests table (`requests.csv`'s columns), judged for `percentile`
    (sweeps and plans judge the percentile of their SLO, p90, rather than the run summary's p99)."""
    done = (requests["status"] == "completed").to_numpy()
    return steady_state_verdict(requests["arrival_s"].to_numpy(dtype=float), requests["finish_s"].to_numpy(dtype=float),
                                done, percentile=percentile, e2e_s=requests["e2e_s"].to_numpy(dtype=float)[done])
