"""Exact closed forms for runs of decode steps (the simulator's fast-forward).

With a fixed batch whose contexts grow by one token per step, each step's compute and memory
times are lines in the step index, so a run of k steps costs a sum of max-of-two-lines series
(`_sum_max_of_lines`), split at the crossover; with pipeline stages a convex piecewise-linear sum
(`_sum_pipeline_steps`). `largest_within` inverts any such increasing run time. See the
"Runs of decode steps" paragraph of `sim.cost.roofline`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from sim.cost.split_kv import split_kv_s


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


class DecodeRuns:
    """`CostModel`'s runs of decode steps with an unchanged batch, in closed form, and the engine's
    step-pricing protocol (`sim.engine.pricing.StepModel`: `batch_time`, `run_time`, `steps_within`,
    `run_limit`) on top of them. Uses the model's constants (`_decode_constants`), its aggregates
    and its placement (`sim.cost.placed`)."""

    def decode_factor(self, n: int) -> float:
        """The measured correction of a decode pass of n sequences (1.0 without one; DecodeCorrection)."""
        if self.decode_correction is None:
            return 1.0
        f = self._factors.get(n)
        if f is None:
            f = self._factors[n] = self.decode_correction.factor(n)
        return f

    # ---- runs of decode steps with an unchanged batch (closed form) --------------------------------
    def _decode_segments(self, decode_context, limit: float = math.inf):
        """Step i of a fixed decode batch as max of two lines on segments of i:

        returns (starts, a_c, b_c, a_m, b_m): on segment k (starts[k] <= i < starts[k+1], the last
        one unbounded) step_i = max(a_c + b_c u, a_m + b_m u) with u = i - starts[k], overheads
        included (the token aggregates are `_decode_aggregates`'). A single segment comes back as
        plain floats (the hot path).
        """
        d = np.asarray(decode_context, dtype=float)
        consts = self._decode_consts.get(len(d))
        if consts is None or consts[5] is not self.params:
            consts = self._decode_constants(len(d))
        compute0, memory0, attn, kvr, sc, _ = consts
        starts, keys0, keys1, read0, read1 = self._decode_aggregates(d, limit)
        return (starts, compute0 + attn * keys0, attn * keys1, memory0 + kvr * read0 + sc * keys0,
                kvr * read1 + sc * keys1)

    def _decode_lines_of_sum(self, n: int, s_full: float):
        """`_decode_segments` of n sequences whose contexts sum to `s_full`, for a model without
        sliding-window layers or padded KV views (one segment): the replica's hot path, which sums
        the contexts as integers (exact, as the float sum of integer contexts is)."""
        consts = self._decode_consts.get(n)
        if consts is None or consts[5] is not self.params:
            consts = self._decode_constants(n)
        compute0, memory0, attn, kvr, sc, _ = consts
        L = self.n_layers
        return (0.0, compute0 + attn * (L * (s_full + n)), attn * (L * n),
                memory0 + kvr * (L * s_full) + sc * (L * (s_full + n)), (kvr + sc) * (L * n))

    def _decode_constants(self, n: int) -> tuple:
        """(compute0, memory0, attn, kvr, sc, params) of `_decode_segments` for a batch of n sequences:
        the terms that do not depend on the contexts, computed once per batch size and params object
        (the simulator prices the same few batch sizes hundreds of thousands of times; issue 17)."""
        p = self._param_tuple()
        bw, att, slow = p[0], p[2], p[6]
        # n tokens and n logits every step: the weight GEMMs (their start-up, n_1/2, included) cost the
        # same every step, max(FLOPs, weight bytes), and sit in both lines' intercepts with the
        # overheads; the memory line also writes the n new tokens' K/V (`_kernel_terms` with no keys
        # and nothing cached: what stays of a step when the contexts are left out)
        matmul_s, weights_s, _, kv_write_s, overhead = self._kernel_terms(p, n, n, 0.0, 0.0)
        gemm = max(matmul_s, float(weights_s))
        if self.graph_sizes is not None:
            overhead = overhead + self.graph_extra_s(n)
        compute0 = gemm + overhead
        memory0 = gemm + kv_write_s + overhead
        # s per layer-key (all decode keys), a capped split-KV kernel's serial chain included (sim.cost.split_kv)
        attn = self.attention_flops_per_layer_key * slow / att + split_kv_s(self.split_kv, 1.0, n)
        kvr = self.kv_read_bytes_per_layer_token / bw  # s per layer-token read
        sc = self.score_bytes_per_layer_key / bw  # s per layer-key of scores through memory (no flash attention)
        c = self._decode_consts[n] = (compute0, memory0, attn, kvr, sc, self.params)
        return c

    def _decode_aggregates(self, d: np.ndarray, limit: float = math.inf):
        """Token aggregates of step i of a fixed decode batch, linear on segments of i:

        returns (starts, keys0, keys1, read0, read1): on segment k, with u = i - starts[k], the
        layer keys attended are keys0 + keys1 u and the KV layer-tokens read read0 + read1 u. With
        n sequences at contexts D_j, step i attends to sum_j kappa(D_j + i + 1) and reads
        sum_j kappa(D_j + i). Without sliding-window layers kappa is linear, so there is one
        segment. With them, min(D_j + i, W) stops growing when sequence j reaches the window: the
        segments start where some sequence does (i = W - D_j or W - D_j - 1), and within a segment
        the sums are linear in i (prefix sums over sorted D). Segments starting at or after
        `limit` (no step there is asked for) are left out; one segment comes back as plain floats.
        """
        n = len(d)
        if self.kv_pad:
            return self._padded_decode_aggregates(d, limit)
        s_full = float(d.sum())
        if self.window is None:  # one segment, as plain floats (hot path)
            L = self.n_layers
            return 0.0, L * (s_full + n), L * n, L * s_full, L * n
        w = self.window
        kinks = np.concatenate([w - d, w - d - 1])
        kinks = kinks[(kinks > 0) & (kinks < limit)]
        if kinks.size == 0:  # no sequence reaches the window within the steps asked for: one segment
            starts = np.zeros(1)
            read_swa, grow_read = np.array([np.minimum(d, w).sum()]), np.array([np.count_nonzero(d < w)])
            keys_swa, grow_keys = np.array([np.minimum(d + 1, w).sum()]), np.array([np.count_nonzero(d + 1 < w)])
        else:
            d = np.sort(d)
            starts = np.unique(np.concatenate([[0.0], kinks]))
            prefix = np.concatenate([[0.0], np.cumsum(d)])

            def swa_sum(offset):  # sum_j min(D_j + offset, W) and #{j: D_j + offset < W}, per offset
                growing = np.searchsorted(d, w - offset, side="left")
                return prefix[growing] + growing * offset + (n - growing) * w, growing

            read_swa, grow_read = swa_sum(starts)
            keys_swa, grow_keys = swa_sum(starts + 1)
        full_read = s_full + n * starts
        # full layers weighted by their attention FLOPs (keys) and cached bytes (reads) per sliding layer's
        keys0 = self.full_key_layers * (full_read + n) + self.n_sliding_layers * keys_swa
        keys1 = self.full_key_layers * n + self.n_sliding_layers * grow_keys
        read0 = self.full_kv_layers * full_read + self.n_sliding_layers * read_swa
        read1 = self.full_kv_layers * n + self.n_sliding_layers * grow_read
        if len(starts) == 1:
            return 0.0, float(keys0[0]), float(keys1[0]), float(read0[0]), float(read1[0])
        return starts, keys0, keys1, read0, read1

    @staticmethod
    def _run_time(segments, k: int) -> float:
        starts, a_c, b_c, a_m, b_m = segments
        if k <= 0:
            return 0.0
        if isinstance(starts, float):
            return _sum_max_of_two_lines(a_c, b_c, a_m, b_m, k)
        ends = np.append(starts[1:], np.inf)
        count = np.clip(np.minimum(ends, k) - starts, 0, None)
        return float(np.sum(_sum_max_of_lines(a_c, b_c, a_m, b_m, count)))

    def decode_run_time(self, decode_context: Sequence[int] | np.ndarray, k: int) -> float:
        """Seconds of k consecutive decode steps of the same batch, every context growing by 1 per step.

        Exact closed form of sum_{i<k} max(compute_i, memory_i): on each segment where both are
        linear in i, split at the index where the lines cross and sum the arithmetic series on each
        side (`_sum_max_of_lines`). One segment for full-attention models: O(1) after one sum.
        """
        if len(decode_context) == 0 or k <= 0:
            return 0.0
        if self.placement is not None:
            return self._placed_run_time(self._placed_decode_lines(decode_context, limit=k), k)
        run_s = self._run_time(self._decode_segments(decode_context, limit=k), k)
        return run_s if self.decode_correction is None else run_s * self.decode_factor(len(decode_context))

    def decode_steps_within(
        self, decode_context: Sequence[int] | np.ndarray, budget_s: float, max_steps: int | None = None
    ) -> int:
        """The largest k such that decode_run_time(decode_context, k) <= budget_s (capped at max_steps).

        Finds the segment the budget ends in from the segments' cumulative times, solves the
        piecewise-quadratic cumulative time there with the quadratic formula, then corrects by whole
        steps against the closed form itself, so the result is its exact integer inverse.
        """
        trivial = _steps_without_search(len(decode_context) == 0, budget_s, max_steps)
        if trivial is not None:
            return trivial
        if self.placement is not None:
            lines = self._placed_decode_lines(decode_context, limit=math.inf if max_steps is None else max_steps + 1)
            return largest_within(lambda k: self._placed_run_time(lines, k), budget_s, max_steps)
        if self.decode_correction is not None:  # the corrected run time is searched itself: an exact inverse
            return largest_within(lambda k: self.decode_run_time(decode_context, k), budget_s, max_steps)
        seg = self._decode_segments(decode_context, limit=math.inf if max_steps is None else max_steps + 1)
        starts, a_c, b_c, a_m, b_m = seg
        if isinstance(starts, float):
            k = self._steps_in_lines(a_c, b_c, a_m, b_m, budget_s)
            return self._fix_up(seg, k, budget_s, max_steps)
        lengths = np.append(np.diff(starts), np.inf)
        seg_total = np.where(
            np.isfinite(lengths), _sum_max_of_lines(a_c, b_c, a_m, b_m, np.where(np.isfinite(lengths), lengths, 0)), np.inf
        )
        before = np.concatenate([[0.0], np.cumsum(seg_total)[:-1]])
        idx = int(np.searchsorted(before + seg_total, budget_s, side="right"))
        idx = min(idx, len(starts) - 1)
        k = int(starts[idx]) + self._steps_in_lines(
            float(a_c[idx]), float(b_c[idx]), float(a_m[idx]), float(b_m[idx]), budget_s - float(before[idx])
        )
        return self._fix_up(seg, k, budget_s, max_steps)

    # ---- the engine's step-pricing protocol (sim.engine.pricing.StepModel) -------------------------
    def batch_time(self, b) -> float:
        """Seconds of one iteration of the batch `b` (a `sim.engine.pricing.StepBatch`): `step_time`.
        With one pair of decode lines (`_one_line`) the decodes enter through their count and the
        sum of their contexts alone (`_aggregate`'s decode terms, from the same exact sum)."""
        if not self._one_line:
            return self.step_time(b.prefill_tokens, b.prefill_context(), b.decode_contexts())
        tokens = seqs = keys = kv_read = 0.0
        L = self.n_layers
        for p, c in zip(b.prefill_tokens, b.prefill_context()):  # `_aggregate`, window-free
            tokens += p
            seqs += 1
            keys += L * (p * c + p * (p + 1) / 2.0)  # `_chunk_layer_keys`
            kv_read += L * c  # `layer_tokens`
        n_d = b.n_decode
        keys_before_decodes = keys
        if n_d:
            s_d = float(b.decode_ctx_sum())
            tokens += n_d
            seqs += n_d
            keys += L * (s_d + n_d)
            kv_read += L * s_d
        if tokens <= 0:
            return 0.0
        params = self.params
        if self._params_of is not params:
            self._params_of, self._params_tuple = params, self._param_tuple()
        c, m, o = self._terms(self._params_tuple, tokens, seqs, keys, kv_read, keys - keys_before_decodes)
        return float(max(c, m) + o)

    def _batch_lines(self, b):
        """(lines, times) of a decode-only batch whose step time is one pair of lines in the step
        index (`_decode_lines_of_sum`: no sliding window, no padded KV views, one device, no measured
        correction), kept in `b.memo` for the event's other calls; None for any other model. `times`
        keeps the run times `_fix_up` computed (k -> seconds)."""
        if not self._one_line:
            return None
        memo = b.memo
        if memo is None:
            memo = b.memo = (self._decode_lines_of_sum(b.n_decode, float(b.decode_ctx_sum())), {})
        return memo

    def _placed_batch_lines(self, b):
        """`_placed_decode_lines` of the decode-only batch `b` (n > 0 sequences) on a placement, kept in `b.memo`
        for the event's other calls, where they do not depend on the steps asked for (no sliding window, no padded
        KV views: one segment, from the contexts' count and sum, `_decode_aggregates`); None for any other model."""
        if self.placement is None or self.window is not None or self.kv_pad:
            return None
        if b.memo is None:
            b.memo = self._placed_decode_lines(b.decode_contexts())
        return b.memo

    def run_time(self, b, k: int) -> float:
        """Seconds of k decode steps of the decode-only batch `b`: `decode_run_time`, or with one
        pair of lines their closed form (`_sum_max_of_two_lines`) from the contexts' sum alone."""
        memo = self._batch_lines(b)
        if memo is None:
            if b.n_decode and k > 0 and self._placed_batch_lines(b) is not None:  # `decode_run_time`, lines kept
                return self._placed_run_time(b.memo, k)
            return self.decode_run_time(b.decode_contexts(), k)
        t = memo[1].get(k)
        return _sum_max_of_two_lines(*memo[0][1:], k) if t is None else t

    def steps_within(self, b, budget_s: float, max_steps: int) -> int:
        """Largest j <= max_steps with `run_time(b, j)` <= budget_s: `decode_steps_within`'s exact
        inverse (on one pair of lines, its estimate and `_fix_up`'s correction directly)."""
        memo = self._batch_lines(b)
        if memo is None:
            if (b.n_decode and _steps_without_search(False, budget_s, max_steps) is None
                    and self._placed_batch_lines(b) is not None):  # `decode_steps_within`, lines kept
                return largest_within(lambda k: self._placed_run_time(b.memo, k), budget_s, max_steps)
            return self.decode_steps_within(b.decode_contexts(), budget_s, max_steps=max_steps)
        if not math.isfinite(budget_s):
            return max_steps
        lines = memo[0]
        return self._fix_up(lines, self._steps_in_lines(*lines[1:], budget_s), budget_s, max_steps, memo[1])

    def run_limit(self, b) -> int | None:
        """Steps before the batch's padded KV view grows a block (`steps_in_kv_block`), None without padding."""
        return self.steps_in_kv_block(b.decode_contexts()) if self.kv_pad else None

    def _fix_up(self, seg, k: int, budget_s: float, max_steps: int | None, times: dict | None = None) -> int:
        """Move an estimate k to the exact largest k with run time <= budget_s (and <= max_steps).
        `times`, when given, keeps every run time computed on the way (k -> seconds), for a caller
        that prices the chosen run next (the replica's fast-forward)."""
        def run(j: int) -> float:
            t = self._run_time(seg, j)
            if times is not None and j > 0:
                times[j] = t
            return t

        if max_steps is not None:
            k = min(k, max_steps)
        while k > 0 and run(k) > budget_s:
            k -= 1
        while (max_steps is None or k < max_steps) and run(k + 1) <= budget_s:
            k += 1
        return k

    @staticmethod
    def _steps_in_lines(a1: float, b1: float, a2: float, b2: float, budget: float) -> int:
        """Approximately the largest j with sum_{u<j} max(a1 + b1 u, a2 + b2 u) <= budget (quadratic
        formula on the piece the budget ends in; callers correct the last step on the exact sum)."""
        if budget <= 0:
            return 0
        if b1 == b2:
            pieces = [((a1, b1) if a1 >= a2 else (a2, b2), math.inf)]
        else:
            r = (a2 - a1) / (b1 - b2)
            first, last = ((a2, b2), (a1, b1)) if b1 > b2 else ((a1, b1), (a2, b2))
            m = math.ceil(min(max(r, 0.0), 1e18)) if math.isfinite(r) else (0 if r < 0 else math.inf)
            pieces = [(first, m), (last, math.inf)] if m > 0 else [(last, math.inf)]
        start = 0
        for (a, b), stop in pieces:
            if math.isfinite(stop):  # _series on scalars, in plain floats (the same operations)
                count = max(stop - start, 0)
                piece = count * a + b * (start + stop - 1) * count / 2.0
            else:
                piece = math.inf
            if budget < piece:
                a0 = a + b * start - b / 2.0  # sum over j steps from `start` = a0 j + b j^2 / 2
                j = 2.0 * budget / (a0 + math.sqrt(a0 * a0 + 2.0 * b * budget))
                return start + (int(j) if math.isfinite(j) else 0)
            budget -= piece
            start = stop
        return int(start)
