"""One accelerator replica serving a request stream, as a SimPy process.

Each loop of `Replica.run` is one engine iteration (or a run of identical ones):

    arrived requests join the queue (or are rejected: they can never fit)
    batch = scheduler.plan(state)            # admission, KV allocation, preemption
    seconds = cost model prices the batch
    yield env.timeout(seconds)
    apply: tokens advance, first tokens and completions are stamped, KV is freed

Fast-forward: when the batch is decode-only and `stable` (see `sim.engine.schedulers.Batch`), nothing can
change it before the next arrival (if an arrival could be admitted), the first completion, or the
step at which the paged cache runs out of blocks — so the replica runs all those k steps in one
timeout, priced by the cost model's closed form `decode_run_time(context, k)`. The number of
events then grows with the number of requests, not with the number of tokens.
`fast_forward=False` runs the same loop one iteration at a time (for tests: the results agree).

Running sequences live in *lanes*: parallel numpy arrays indexed by a small integer, so a decode
batch's contexts are one fancy-indexing away and no per-token or per-sequence Python loop runs on
the hot path.
"""

from __future__ import annotations

import math

import numpy as np

from sim.cost.decode_runs import _sum_max_of_two_lines
from sim.cost.llamacpp import Piece, split_equal, split_simple
from sim.engine.kv import KVAllocator
from sim.engine.metrics import GapLog, IterationLog, RequestLog
from sim.engine.schedulers import Batch, Scheduler
from sim.engine.state import ArrivalSource, Pending, ReplicaState

_min = np.minimum.reduce  # ndarray.min() of a 1-D array, minus numpy's Python wrapper (once per event)
_isum = np.add.reduce  # ndarray.sum(), likewise


class Replica:
    """The SimPy process: plan -> price -> wait -> apply, until the stream is drained."""

    def __init__(self, env, *, cost, scheduler: Scheduler, kv: KVAllocator, source: ArrivalSource,
                 log: RequestLog, gaps: GapLog, iterations: IterationLog, fast_forward: bool = True,
                 check_invariants: bool = False, prefix=None, per_sequence_kv_streams: bool = False,
                 ubatch_tokens: int | None = None) -> None:
        self.env = env
        self.per_sequence_kv_streams = per_sequence_kv_streams
        # llama.cpp's physical batch (EngineConfig.ubatch_tokens): an iteration with more tokens runs
        # as several passes over the weights (`run`'s prefill branch, `_stream_groups`); None = one pass
        self.ubatch_tokens = ubatch_tokens
        self.cost = cost
        self.scheduler = scheduler
        self.kv = kv
        self.source = source
        self.log = log
        self.gaps = gaps
        self.iterations = iterations
        self.fast_forward = fast_forward
        self.check_invariants = check_invariants
        self.state = ReplicaState(kv, log, lanes=min(scheduler.max_seqs, 4096), prefix=prefix)
        self.state.lazy = True  # decoding lanes as a base plus the decode clock (`ReplicaState.lazy`)
        self.state.shadow = check_invariants  # ... and the arrays written too, to be compared
        self.peak_used_tokens = 0
        self.peak_reserved_tokens = 0
        self.batch_steps = 0
        self.batch_seq_steps = 0
        self.batch_max = 0
        self.skipped_decodes = False  # some decoding lane got no token in the last iteration
        self.handoff: dict | None = None  # disaggregated decode: request id -> (first token s, KV tokens)
        self.last_clock_s = 0.0

    # ---- arrivals -----------------------------------------------------------------------------
    def _take_arrivals(self, now_s: float) -> None:
        if self.source.next_s > now_s:
            return
        st = self.state
        sched = self.scheduler
        log = self.log
        due = self.source.due(now_s)
        while due:
            rejected = False
            for t, r in due:
                row = log.add(r.id, t, r.prompt_tokens)
                why = sched.admission_error(r.prompt_tokens, r.max_tokens, st)
                if why is None:
                    p = Pending(row, r)
                    if self.handoff is not None:  # disaggregated decode: prompt KV and first token arrive
                        p.last_token_s, p.transferred = self.handoff.pop(r.id)
                        p.generated = 1
                    st.waiting.append(p)
                else:
                    # refused on receipt (a server validates lengths before queueing), at its arrival
                    log.reject(row, t, why)
                    self.source.rejected(r, t)  # closed loop: that client sends its next one then
                    rejected = True
            due = self.source.due(now_s) if rejected else None

    # ---- the process --------------------------------------------------------------------------
    def run(self):
        env = self.env
        st = self.state
        cost = self.cost
        sched = self.scheduler
        kv = self.kv
        source = self.source
        itlog = self.iterations if self.iterations.enabled else None
        grows = kv.grows_on_decode
        lines_of = self._decode_lines_fn()
        while True:
            now = env.now
            st.now_s = now
            if source.next_s <= now:  # (checked here too: a call per event is measurable)
                self._take_arrivals(now)
            if self.check_invariants:
                st.check_phases()
            batch = sched.plan(st)
            if self.check_invariants:
                kv.check()
            if not batch.prefill_lanes and not len(batch.decode_lanes):  # batch.empty
                if st.n_running:  # pragma: no cover - a scheduler bug; never hang on it
                    raise AssertionError(f"{sched.name} planned nothing with {st.n_running} sequences running")
                if st.waiting:
                    # Idle engine, nothing admitted: the head can never be scheduled. Reject it.
                    p = st.waiting.popleft()
                    self.log.reject(p.row, now, "cannot be scheduled on an idle engine (KV cache or limits too small)")
                    source.rejected(p.request, now)
                    continue
                wait = source.idle_wait(env, now)
                if wait is None:
                    return
                yield wait
                continue

            # Numpy calls cost about a microsecond each on a batch of a hundred lanes, and this runs
            # once per event: the decode batch is gathered once, as ints (KV, stop) and as floats
            # (what the cost model converts to anyway), and the first completion is one min().
            dl = batch.decode_lanes
            n_dec = len(dl)
            pl = batch.prefill_lanes
            lazy = st.lazy
            if lazy and n_dec != st.n_decoding and (n_dec or st.grown):
                # some decoding lane does not step (a budget-cut batch): the lockstep ends here
                st.sync()
                st.lazy = lazy = False
            elif not n_dec:
                st.grown = 0  # (every lane grown in this plan was preempted)
            if lazy and n_dec:
                # every decoding lane steps: contexts from the base and the clock, only if read
                ctx = st.cbase[dl] + st.decode_clock \
                    if pl or lines_of is None or not grows or self.check_invariants else None
                remaining = None
                first_done = st.first_stop()
            elif n_dec:
                # the contexts the scheduler gathered to grow the batch's KV (`_grow_decodes`), and
                # the stop points of the decoding lanes, gathered once per set of lanes
                sc = st.decode_ctx
                ctx = sc[1] if sc is not None and sc[0] is dl else st.ctx[dl]
                if st.lockstep and n_dec == st.n_decoding:  # the stop clocks' heap (`first_stop`)
                    remaining = None
                    first_done = st.first_stop()
                else:
                    if dl is st._decode_array:
                        stop = st._decode_stop
                        if stop is None:
                            stop = st._decode_stop = st.stop_ctx[dl]
                    else:
                        stop = st.stop_ctx[dl]
                    remaining = stop - ctx  # decode steps to each lane's last token (>= 1)
                    first_done = int(_min(remaining))
            else:
                ctx = remaining = dl
                first_done = 0
            st.decode_ctx = None
            # as floats, what the cost model converts to (the one-segment lines need only the sum)
            ctx_f = (ctx.astype(np.float64) if n_dec else dl) if pl or lines_of is None else None
            if pl:
                k = 1
                ctx_p = st.ctx[pl[0]] if len(pl) == 1 else st.ctx[pl]
                ctx_pl = [int(ctx_p)] if len(pl) == 1 else ctx_p.tolist()
                ub = self.ubatch_tokens
                over = ub is not None and sum(batch.prefill_tokens) + n_dec > ub
                if self.per_sequence_kv_streams and (n_dec or len(pl) > 1 or over):
                    # one pass over the weights per ubatch llama.cpp cuts the batch into
                    # (EngineConfig.per_sequence_kv_streams; sim.cost.llamacpp.split_equal)
                    t = cost.passes_time(split_equal(self._pieces(batch, dl, ctx, ctx_pl), ub))
                elif over:
                    # one KV stream: the batch's tokens in order, ubatch_tokens per pass (split_simple)
                    t = cost.simple_passes_time(split_simple(self._pieces(batch, dl, ctx, ctx_pl), ub))
                else:
                    t = cost.step_time(batch.prefill_tokens, ctx_pl, ctx_f)
                t_first = t
            elif lines_of is not None:  # one pass, one segment: the batch is priced once (`_decode_lines_fn`)
                # the contexts' sum, kept by the state when the batch is every decoding lane
                lines = lines_of(n_dec, float(st.decode_ctx_sum if n_dec == st.n_decoding else _isum(ctx)))
                times: dict[int, float] = {}  # k -> run time of k steps, as `_run_length` computed them
                k = self._run_length(batch, ctx, ctx_f, first_done, now, lines, times) \
                    if self.fast_forward and batch.stable else 1
                # CostModel._run_time on one segment (float starts: `_decode_lines_fn`)
                t = times[k] if k in times else _sum_max_of_two_lines(*lines[1:], k)
                t_first = (times[1] if 1 in times else _sum_max_of_two_lines(*lines[1:], 1)) if k > 1 else t
            else:
                k = self._run_length(batch, ctx, ctx_f, first_done, now) if self.fast_forward and batch.stable else 1
                t = self._decode_time(dl, ctx_f, k)
                t_first = self._decode_time(dl, ctx_f, 1) if k > 1 else t
            yield env.timeout(t)
            end = now + t
            st.now_s = end
            if self.check_invariants and end < self.last_clock_s:
                raise AssertionError("the clock went back")
            self.last_clock_s = end

            # ---- apply: tokens advance -------------------------------------------------------
            n_seqs = n_dec + len(pl)
            self.batch_steps += k
            self.batch_seq_steps += k * n_seqs
            if n_seqs > self.batch_max:
                self.batch_max = n_seqs
            finished: list[int] = []
            if n_dec:
                if self.skipped_decodes or k > 1:
                    self._record_decode_gaps(dl, now, t_first, t, k)
                else:
                    self.gaps.add(t_first, 0.0, 1, n_dec)
            if lazy and n_dec:
                # the clock (`stepped`) moves every lane's context; blocks counted, not written
                st.decode_ctx_sum += k * n_dec
                st.grown = 0
                st.last_step_s = end
                if self.check_invariants:  # (`shadow`) the arrays as before, for `check_phases`
                    ctx += k
                    st.ctx[dl] = ctx
                    st.last_token_s[dl] = end
                if k > 1 and grows:
                    total = self._run_blocks(dl, ctx, k)
                    if self.check_invariants:
                        kv.set_held(dl, ctx, total)
                    else:
                        kv.take_blocks(total)
                st.used_tokens += k * n_dec
                if first_done <= k:
                    finished = st.stops_within(k)
            elif n_dec:
                ctx += k
                st.ctx[dl] = ctx
                st.decode_ctx_sum += k * n_dec
                if k > 1 and grows:
                    if st.phases_ok and n_dec == st.n_decoding:
                        # every lane now holds ceil(ctx / bs) blocks; how many that adds, from the phases
                        kv.set_held(dl, ctx, self._run_blocks(dl, ctx, k))
                    elif not kv.grow_by(dl, ctx, 0):  # pragma: no cover - _run_length bounds k
                        raise AssertionError("fast-forward ran past the KV cache")
                st.used_tokens += k * n_dec
                st.last_token_s[dl] = end
                if first_done <= k:
                    finished = st.stops_within(k) if remaining is None else dl[remaining <= k].tolist()
            self.skipped_decodes = n_dec < st.n_decoding
            if n_dec and st.lockstep:
                st.stepped(n_dec, k)
            if pl:
                self._apply_prefill(batch, end, finished)
            if st.used_tokens > self.peak_used_tokens:
                self.peak_used_tokens = st.used_tokens
            # Peak of reserved KV: allocation happens in plan (admission, growth) and in apply (a
            # fast-forwarded run's blocks) and nothing is freed between them, so after apply is the peak.
            reserved = (kv.total_blocks - kv.free_blocks) * kv.block_size  # kv.reserved_tokens, inlined
            if reserved > self.peak_reserved_tokens:
                self.peak_reserved_tokens = reserved
            if itlog is not None:
                itlog.add(now, t, k, len(pl), sum(batch.prefill_tokens), n_dec,
                          st.used_tokens, reserved, len(st.waiting), len(st.running))
            for lane in finished:
                p = st.finish(lane, end)
                source.done(p.request, end)
            if self.check_invariants:
                kv.check()

    def _run_blocks(self, dl, ctx, k: int) -> int:
        """Blocks a fast-forwarded run of k decode steps adds to all the decoding lanes, counted from
        the block phases (`ReplicaState.blocks_for_steps`; checked against the allocator's own count
        under `check_invariants`, where `ctx` holds the lanes' contexts after the run)."""
        total = self.state.blocks_for_steps(k)
        if self.check_invariants and total != self.kv.grow_blocks_needed(dl, ctx):
            raise AssertionError("block phases disagree with the allocator on a run's growth")
        if total > self.kv.free_blocks:  # pragma: no cover - _run_length bounds k
            raise AssertionError("fast-forward ran past the KV cache")
        return total

    def _decode_lines_fn(self):
        """`CostModel._decode_segments` when a decode batch's step time is one pair of lines over
        its steps (a plain CostModel: no sliding window, no padded KV views, one device, no measured
        correction; one KV stream): the replica then prices a batch once per event and reads the run
        time (`decode_run_time`), the first step and the steps within a budget (`decode_steps_within`)
        from the same lines, exactly as those methods compute them. None otherwise."""
        from sim.cost.roofline import CostModel

        c = self.cost
        if (type(c) is not CostModel or self.per_sequence_kv_streams or c.window is not None or c.kv_pad
                or c.placement is not None or c.decode_correction is not None
                or (self.ubatch_tokens is not None and self.scheduler.max_seqs > self.ubatch_tokens)):
            return None
        return c._decode_lines_of_sum

    def _pieces(self, batch: Batch, dl: np.ndarray, ctx: np.ndarray, ctx_pl: list[int]) -> list[Piece]:
        """The batch as llama-server builds it: one token per decoding slot in slot order, then
        the prompt chunks in admission order (a chunk has logits when it ends its prompt)."""
        goal = self.state.prefill_goal
        order = np.argsort(dl, kind="stable")
        pieces = [Piece(int(dl[i]), 1, int(ctx[i])) for i in order]
        pieces += [Piece(lane, chunk, c, c + chunk >= goal[lane])
                   for lane, chunk, c in zip(batch.prefill_lanes, batch.prefill_tokens, ctx_pl)]
        return pieces

    def _stream_groups(self, dl: np.ndarray) -> list[np.ndarray] | None:
        """The decodes' positions in `dl` by the pass over the weights llama.cpp runs them in. With
        one KV stream per sequence, runs of consecutive lanes (slot ids): each run is its own pass
        (`split_equal` only packs consecutive seq_ids). More decodes than a pass holds take one pass
        per pass-full, in slot order: `ubatch_tokens` of them with one stream, `ubatch_tokens` + 1
        in a run with one stream per sequence (`split_equal`). None when the decodes are one pass."""
        ub = self.ubatch_tokens
        # sequences per pass: split_simple's n_ubatch tokens, or split_equal's n_ubatch + 1 sequences
        per_pass = None if ub is None else ub + 1 if self.per_sequence_kv_streams else ub
        over = per_pass is not None and len(dl) > per_pass
        if not over and (not self.per_sequence_kv_streams or len(dl) < 2):
            return None
        order = np.argsort(dl, kind="stable")
        groups = [order]
        if self.per_sequence_kv_streams:
            breaks = np.flatnonzero(np.diff(dl[order]) != 1) + 1
            groups = np.split(order, breaks) if len(breaks) else groups
        if over:
            groups = [g[i:i + per_pass] for g in groups for i in range(0, len(g), per_pass)]
        return groups if len(groups) > 1 else None

    def _decode_time(self, dl: np.ndarray, ctx_f: np.ndarray, k: int) -> float:
        """Seconds of k decode steps of the batch: one closed-form run per pass (`_stream_groups`)."""
        groups = self._stream_groups(dl)
        if groups is None:
            return self.cost.decode_run_time(ctx_f, k)
        return sum(self.cost.decode_run_time(ctx_f[g], k) for g in groups)

    def _decode_steps_within(self, dl: np.ndarray, ctx_f: np.ndarray, budget_s: float, max_steps: int) -> int:
        """The largest k <= max_steps with `_decode_time(k)` <= budget_s: the cost model's exact
        inverse for one pass, bisection on the (increasing) sum of closed forms for several."""
        groups = self._stream_groups(dl)
        if groups is None:
            return self.cost.decode_steps_within(ctx_f, budget_s, max_steps=max_steps)
        lo, hi = 0, max_steps  # _decode_time(lo) <= budget; find the last k that fits
        if self._decode_time(dl, ctx_f, hi) <= budget_s:
            return hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._decode_time(dl, ctx_f, mid) <= budget_s:
                lo = mid
            else:
                hi = mid
        return lo

    def _run_length(self, batch: Batch, ctx: np.ndarray, ctx_f: np.ndarray, first_done: int, now_s: float,
                    lines=None, times: dict | None = None) -> int:
        """Decode steps the batch can run unchanged: up to its first completion (`first_done`
        steps away), the last step the KV cache can hold, the last step before a growth evicts a
        prefix-cached block (when a waiting request could be admitted), and the first step ending
        at or after the next arrival (when an arrival could be admitted). `ctx_f`: `ctx` as floats."""
        st = self.state
        dl = batch.decode_lanes
        k = first_done
        if k <= 1:
            return 1
        # With requests waiting for a lane, the head is retried every iteration and keeps failing
        # while the free blocks only shrink -- unless a growth evicts a cached block: the head's
        # prefix hit may then shrink, and a shorter hit can need fewer blocks (a hit revives its
        # unreferenced cached blocks, which counted as free) and be admitted. So the run stops
        # before the first step whose growth would evict a cached block.
        cache = self.kv.prefix
        keep = len(cache.unreferenced) if cache is not None and self.scheduler.waiting_may_be_admitted(st) else 0
        if st.phases_ok and len(dl) == st.n_decoding:
            avail = st.steps_available(k, keep)
            if self.check_invariants and avail != self.kv.decode_steps_available(dl, ctx, k, keep):
                raise AssertionError("block phases disagree with the allocator on the steps available")
            k = max(1, min(k, avail))
        else:
            k = max(1, min(k, self.kv.decode_steps_available(dl, ctx, k, keep)))
        if k > 1 and getattr(self.cost, "kv_pad", 0):
            # padded KV views (CostModel.padded_kv): stop where a pass's view grows a block, so
            # every step of the run costs the same (the per-step gaps below assume a linear run)
            groups = self._stream_groups(dl)
            parts = [ctx_f] if groups is None else [ctx_f[g] for g in groups]
            k = max(1, min(k, *(self.cost.steps_in_kv_block(part) for part in parts)))
        if k > 1 and self.scheduler.arrival_may_change_plan(st):
            t_next = self.source.next_time()
            if t_next is not None:
                budget = t_next - now_s
                if lines is None:
                    kw = self._decode_steps_within(dl, ctx_f, budget, k)
                elif not math.isfinite(budget):
                    kw = k
                else:
                    # CostModel.decode_steps_within on one segment, from the lines already computed:
                    # its estimate, then `_fix_up`'s exact correction, keeping the run times in `times`
                    _, a_c, b_c, a_m, b_m = lines
                    kw = self.cost._fix_up(lines, self.cost._steps_in_lines(a_c, b_c, a_m, b_m, budget), budget, k,
                                           times)
                if kw < k:
                    # Stop at the first step ending after the arrival, where a step-by-step run
                    # admits it. (A step ending exactly at the arrival — a tie of two float sums —
                    # is counted as before it.)
                    k = kw + 1
        return k

    def _record_decode_gaps(self, dl: np.ndarray, start_s: float, t_first: float, total_s: float, k: int) -> None:
        """ITL of the tokens this run produces: k steps of B gaps, step j lasting
        t_first + j * delta (linear in j: each step reads one more token of KV per sequence)."""
        st = self.state
        n = len(dl)
        delta = (2.0 * total_s / k - 2.0 * t_first) / (k - 1) if k > 1 else 0.0
        if self.skipped_decodes:
            stall = start_s - (np.maximum(st.t_join[dl], st.last_step_s) if st.lazy else st.last_token_s[dl])
            late = stall > 0
            n_late = int(late.sum())
            if n_late:
                for extra in stall[late].tolist():
                    self.gaps.add(t_first + extra, 0.0, 1, 1)
                self.gaps.add(t_first, 0.0, 1, n - n_late)
                self.gaps.add(t_first + delta, delta, k - 1, n)
                return
        self.gaps.add(t_first, delta, k, n)

    def _apply_prefill(self, batch: Batch, end_s: float, finished: list[int]) -> None:
        st = self.state
        log = self.log
        for lane, chunk in zip(batch.prefill_lanes, batch.prefill_tokens):
            st.ctx[lane] += chunk
            st.used_tokens += chunk
            if st.ctx[lane] < st.prefill_goal[lane]:
                continue
            # prefill complete: this iteration's logits give the next token
            st.last_token_s[lane] = end_s  # (before `start_decoding`: its joining time)
            st.start_decoding(lane)
            p = st.pending[lane]
            if p.keys:  # its prompt's full prefix blocks are now reusable by others
                st.kv.insert_prefix(lane, p.keys)
            if p.generated == 0:
                log.first_token_s[p.row] = end_s
            else:  # recomputed after a preemption: the client waited since its last token
                self.gaps.add(end_s - p.last_token_s, 0.0, 1, 1)
            if st.ctx[lane] >= st.stop_ctx[lane]:
                finished.append(lane)
