"""Exact closed forms for runs of decode steps (the simulator's fast-forward).

With a fixed batch whose contexts grow by one token per step, each step's compute and memory
times are lines in the step index, so a run of k steps costs a sum of max-of-two-lines series
(`_sum_max_of_lines`), split at the crossover; with pipeline stages a convex piecewise-linear sum
(`_sum_pipeline_steps`). `largest_within` inverts any such increasing run time. See the
"Runs of decode steps" paragraph of `sim.cost.roofline`.
"""

from __future__ import annotations

import math

import numpy as np


def _sum_max_of_lines(a1, b1, a2, b2, count):
    """sum_{u=0}^{count-1} max(a1 + b1 u, a2 + b2 u), elementwise over numpy arrays (exact).

    The two lines cross at u = r = (a2 - a1) / (b1 - b2); on each side one line dominates and its
    sum is an arithmetic series.
    """
    a1, b1, a2, b2, count = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (a1, b1, a2, b2, count)))
    db = b1 - b2
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(db != 0, (a2 - a1) / np.where(db != 0, db, 1.0), 0.0)
    # m = first u at which the line dominating at large u takes over (clipped to [0, count]).
    m = np.clip(np.ceil(np.clip(r, -1.0, count + 1.0)), 0, count)
    first_a, first_b = np.where(db > 0, a2, a1), np.where(db > 0, b2, b1)
    last_a, last_b = np.where(db > 0, a1, a2), np.where(db > 0, b1, b2)
    split = _series(first_a, first_b, 0, m) + _series(last_a, last_b, m, count)
    flat = np.where(a1 >= a2, _series(a1, b1, 0, count), _series(a2, b2, 0, count))
    return np.where(db == 0, flat, split)


def _sum_max_of_two_lines(a1: float, b1: float, a2: float, b2: float, count: float) -> float:
    """Scalar twin of `_sum_max_of_lines` (the simulator's hot path: no numpy call overhead)."""
    if count <= 0:
        return 0.0
    db = b1 - b2
    if db == 0:
        a, b = (a1, b1) if a1 >= a2 else (a2, b2)
        return count * a + b * (count - 1) * count / 2.0
    r = (a2 - a1) / db
    m = min(max(math.ceil(min(max(r, -1.0), count + 1.0)), 0), count)
    if db > 0:
        fa, fb, la, lb = a2, b2, a1, b1
    else:
        fa, fb, la, lb = a1, b1, a2, b2
    return m * fa + fb * (m - 1) * m / 2.0 + (count - m) * la + lb * (m + count - 1) * (count - m) / 2.0


def _series(a, b, start, stop):
    """sum_{u=start}^{stop-1} (a + b u) — an arithmetic series (0 when stop <= start)."""
    count = np.maximum(stop - start, 0)
    return count * a + b * (start + stop - 1) * count / 2.0


def _sum_pipeline_steps(parts, comm_s: float, microbatches: float, count: int) -> float:
    """sum_{u<count} max(sum_p max(c_p(u), m_p(u)) + comm_s, mb x max_p max(c_p(u), m_p(u))), exact,
    for parts given as lines (a_c, b_c, a_m, b_m): c_p(u) = a_c + b_c u, m_p(u) = a_m + b_m u.

    Between two consecutive crossings of any two of the lines no max changes its argument, so
    both terms of the outer max are lines there and `_sum_max_of_two_lines` sums that piece
    exactly. Stages with equal lines are counted once with their multiplicity (a pipeline has
    at most three kinds: the layer count, one more layer, the LM head), so the crossings are few.
    """
    if count <= 0:
        return 0.0
    kinds: dict[tuple[float, float, float, float], int] = {}
    for p in parts:
        kinds[p] = kinds.get(p, 0) + 1
    atoms = sorted({(a, b) for a_c, b_c, a_m, b_m in kinds for a, b in ((a_c, b_c), (a_m, b_m))})
    points = {0.0, float(count)}
    for i, (a1, b1) in enumerate(atoms):
        for a2, b2 in atoms[i + 1:]:
            if b1 != b2:
                r = (a2 - a1) / (b1 - b2)
                if 0.0 < r < count:
                    points.add(r)
    edges = sorted(points)
    total = 0.0
    for lo, hi in zip(edges, edges[1:]):
        u0, u1 = math.ceil(lo), math.ceil(hi)  # the integer steps in [lo, hi)
        if u1 <= u0:
            continue
        mid = (lo + hi) / 2.0
        sum_a, sum_b, best_a, best_b = comm_s, 0.0, -math.inf, 0.0
        for (a_c, b_c, a_m, b_m), mult in kinds.items():
            a, b = (a_c, b_c) if a_c + b_c * mid >= a_m + b_m * mid else (a_m, b_m)
            sum_a += mult * a
            sum_b += mult * b
            if a + b * mid > best_a + best_b * mid:
                best_a, best_b = a, b
        total += _sum_max_of_two_lines(sum_a + sum_b * u0, sum_b, microbatches * (best_a + best_b * u0),
                                       microbatches * best_b, u1 - u0)
    return total


def largest_within(run_time, budget_s: float, max_steps: int | None) -> int:
    """Largest k with run_time(k) <= budget_s (capped at max_steps), for run_time increasing in k:
    doubling then bisection on the exact closed form, O(log k) evaluations."""
    if run_time(1) > budget_s or max_steps == 0:
        return 0
    lo, hi = 1, 2  # run_time(lo) <= budget
    while run_time(hi) <= budget_s:
        if max_steps is not None and hi >= max_steps:
            return max_steps
        lo, hi = hi, hi * 2
    if max_steps is not None:
        hi = min(hi, max_steps + 1)
    while hi - lo > 1:  # run_time(lo) <= budget < run_time(hi) (or hi = max_steps + 1)
        mid = (lo + hi) // 2
        if run_time(mid) <= budget_s:
            lo = mid
        else:
            hi = mid
    return lo


def _steps_without_search(empty: bool, budget_s: float, max_steps: int | None) -> int | None:
    """`decode_steps_within`'s answer when no search is needed: 0 steps for an empty batch,
    `max_steps` for an infinite budget (which must then be given); None otherwise."""
    if empty:
        return 0
    if not math.isfinite(budget_s):
        if max_steps is None:
            raise ValueError("an infinite budget needs max_steps")
        return max_steps
    return None
