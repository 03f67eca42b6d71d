"""One accelerator replica serving a request stream, as a SimPy process.

Each loop of `Replica.run` is one engine iteration (or a run of identical ones):

    arrived requests join the queue (or are rejected: they can never fit)
    plan:  batch = scheduler.plan(state)        # admission, KV allocation, preemption
    price: seconds = step_model.batch_time(b)   # or .run_time(b, k) for k decode steps
    wait:  yield env.timeout(seconds)
    apply: tokens advance, first tokens and completions are stamped, KV is freed

The step model is the engine's one seam to the cost model (`sim.engine.pricing.StepModel`): the
replica asks it those prices, how many decode steps end within a time budget, and how many it
prices as one linear run, and nothing else.

Arrivals at a step's end: a request that reaches the replica at the very instant a step ends (a
closed-loop client's next request, sent when the step's output finished its predecessor) joins the
queue only after the next step has been planned, so it is first scheduled one step later. Real
engines plan the next step as soon as a step's outputs exist, before those outputs have reached the
client and its reaction has come back: vLLM V1's `EngineCoreProc.run_busy_loop` puts a step's outputs
on the output queue (`_process_engine_step`; a separate thread serializes and sends them to the API
server process, which detokenizes and streams them) and at once drains what its input thread has
already queued (`_process_input_queue`, non-blocking while requests run) and schedules the next step
(vllm/v1/engine/core.py at v0.9.2 and main@00080ee); SGLang's `Scheduler.event_loop_normal`
likewise sends a batch's results to the detokenizer (`process_batch_result`) and polls
`recv_requests` for the next batch straight away. The round trip (ZMQ, detokenize, HTTP stream,
client, HTTP request, tokenize, ZMQ) takes milliseconds; scheduling takes well under one. So under a
saturated closed loop each new request waits for the step already planned — a full-budget prefill
step when the cohorts before it are prefilling — then for its own. An idle engine blocks on its input
queue and takes such a request at once (`run`).

Fast-forward: when the batch is decode-only and `stable` (see `sim.engine.schedulers.Batch`), nothing can
change it before the next arrival (if an arrival could be admitted), the first completion, or the
step at which the paged cache runs out of blocks — so the replica runs all those k steps in one
timeout, priced by the step model's closed form `run_time(b, k)`. The number of
events then grows with the number of requests, not with the number of tokens.
`fast_forward=False` runs the same loop one iteration at a time (for tests: the results agree).

Receive interval (SGLang's `--scheduler-recv-interval`, `EngineConfig.recv_interval_steps` > 1; sim.engine.recv):
arrived requests wait in an inbox until a pass that reads them (the first after a prefill step or an idle
pass, else every N-th decode step) and only then join the queue. A fast-forwarded run stops at that pass
while a request waits in the inbox or may still arrive.

Running sequences live in *lanes*: parallel numpy arrays indexed by a small integer, so a decode
batch's contexts are one fancy-indexing away and no per-token or per-sequence Python loop runs on
the hot path.
"""

from __future__ import annotations

import numpy as np

from sim.engine.kv import KVAllocator
from sim.engine.metrics import GapLog, IterationLog, RequestLog
from sim.engine.pricing import StepBatch, StepModel
from sim.engine.recv import RecvGate
from sim.engine.schedulers import Batch, Scheduler
from sim.engine.state import Pending, ReplicaState
from workloads.arrivals import ArrivalSource

_min = np.minimum.reduce  # ndarray.min() of a 1-D array, minus numpy's Python wrapper (once per event)


class Replica:
    """The SimPy process: plan -> price -> wait -> apply, until the stream is drained."""

    def __init__(self, env, *, step_model: StepModel, scheduler: Scheduler, kv: KVAllocator, source: ArrivalSource,
                 log: RequestLog, gaps: GapLog, iterations: IterationLog, fast_forward: bool = True,
                 check_invariants: bool = False, prefix=None, host=None, recv_interval: int = 1) -> None:
        self.env = env
        self.host = host  # the host stage's queue (sim.engine.host.HostQueue): when the client sees tokens; None = at once
        self.step_model = step_model  # prices the batches (sim.engine.pricing.StepModel)
        self.scheduler = scheduler
        self.kv = kv
        self.source = source
        self.log = log
        self.gaps = gaps
        self.iterations = iterations
        self.fast_forward = fast_forward
        self.check_invariants = check_invariants
        self.state = ReplicaState(kv, log, lanes=min(scheduler.max_seqs, 4096), prefix=prefix)
        self.peak_used_tokens = 0
        self.peak_reserved_tokens = 0
        self.batch_steps = 0
        self.batch_seq_steps = 0
        self.batch_max = 0
        self.skipped_decodes = False  # some decoding lane got no token in the last iteration
        self.handoff: dict | None = None  # disaggregated decode: request id -> (first token s, KV tokens)
        self.last_clock_s = 0.0
        self.held: list = []  # (sent, request) that arrived as the last step ended: queued after the next plan
        # SGLang's receive interval (sim.engine.recv): arrived requests wait in `inbox` for a pass that reads them
        self.gate = RecvGate(recv_interval) if recv_interval > 1 else None
        self.inbox: list = []

    # ---- arrivals -----------------------------------------------------------------------------
    def _take_arrivals(self, now_s: float, hold_ties: bool = False) -> None:
        """Arrived requests join the queue. `hold_ties` (the replica has just ended a step at `now_s`):
        those that arrive at that very instant are held in `self.held` for the plan after this one
        (`run`): a request sent in reaction to the step's output cannot be in the queue of the step
        the engine schedules as soon as that output exists."""
        if self.source.next_s > now_s:
            return
        due = self.source.due(now_s)
        if hold_ties and due:
            late = [a for a in due if a[0] >= now_s]
            if late:
                self.held.extend(late)
                due = [a for a in due if a[0] < now_s]
        if self.gate is not None:
            self.inbox.extend(due)  # read by the next pass that polls (`_read_inbox`)
            return
        self._queue(due, now_s)

    def _read_inbox(self, now_s: float) -> None:
        """A pass polls the socket when the receive gate is due: the inbox joins the queue."""
        if self.gate.due():
            self.gate.read()
            if self.inbox:
                inbox, self.inbox = self.inbox, []
                self._queue(inbox, now_s)

    def _queue(self, due: list, now_s: float) -> None:
        """`due` (sent time, request) join the waiting queue, or are refused at receipt."""
        st = self.state
        sched = self.scheduler
        log = self.log
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

    def _release_held(self, now_s: float) -> None:
        """The held arrivals join the queue (or are refused), in arrival order."""
        held, self.held = self.held, []
        if self.gate is not None:
            self.inbox.extend(held)
            return
        self._queue(held, now_s)

    # ---- the process --------------------------------------------------------------------------
    def run(self):
        env, st, sched, kv, source = self.env, self.state, self.scheduler, self.kv, self.source
        price = self.step_model
        stepped = False  # whether a step has just ended at `now`
        while True:
            now = env.now
            st.now_s = now
            if source.next_s <= now:  # (checked here too: a call per event is measurable)
                self._take_arrivals(now, stepped)
            if self.gate is not None:
                self._read_inbox(now)
            stepped = False
            if self.check_invariants:
                st.check_lanes()
            batch = sched.plan(st)  # ---- plan
            if self.check_invariants:
                st.write_blocks()
                kv.check()
            if self.held:  # arrived as the last step ended (see the module's docstring)
                if not batch.prefill_lanes and not len(batch.decode_lanes):
                    self._release_held(now)  # an idle engine blocks on its queue: they are planned at once
                    if self.gate is not None:
                        self.gate.after_other()  # (its passes with no batch spin: the next one reads)
                    continue
                self._release_held(now)  # they join the queue the next plan reads
                batch.stable = False  # (a run of identical steps would pass that plan)
            if not batch.prefill_lanes and not len(batch.decode_lanes):  # batch.empty
                if self.inbox:  # an idle SGLang loop spins through passes with no batch: the next one reads
                    self.gate.after_other()
                    continue
                if self._reject_unschedulable(now):
                    continue
                wait = source.idle_wait(env, now)
                if wait is None:
                    return
                yield wait
                if self.gate is not None:
                    self.gate.after_other()
                continue
            b, first_done, remaining = self._step_batch(batch)
            if batch.prefill_lanes:  # ---- price
                k = 1
                t = t_first = price.batch_time(b)
            else:
                k, t = self._run_length(batch, b, first_done, now) if self.fast_forward and batch.stable else (1, None)
                if t is None:
                    t = price.run_time(b, k)
                t_first = price.run_time(b, 1) if k > 1 else t
            yield env.timeout(t)  # ---- wait
            self._apply(batch, b, k, now, t_first, t, first_done, remaining)  # ---- apply
            if self.gate is not None:
                if batch.prefill_lanes:
                    self.gate.after_other()
                else:
                    self.gate.after_decode(k)
            stepped = True

    def _reject_unschedulable(self, now: float) -> bool:
        """An empty plan: with requests waiting on an idle engine the head can never be scheduled,
        so it is rejected (True); False when nothing waits (the replica idles until an arrival)."""
        st = self.state
        if st.n_running:  # pragma: no cover - a scheduler bug; never hang on it
            raise AssertionError(f"{self.scheduler.name} planned nothing with {st.n_running} sequences running")
        if not st.waiting:
            return False
        p = st.waiting.popleft()
        self.log.reject(p.row, now, "cannot be scheduled on an idle engine (KV cache or limits too small)")
        self.source.rejected(p.request, now)
        return True

    def _step_batch(self, batch: Batch) -> tuple[StepBatch, int, np.ndarray | None]:
        """The batch for the step model, the decode steps to its first completion and (when not
        every decoding lane steps, or the stop clocks are not kept) each lane's remaining steps."""
        st = self.state
        dl = batch.decode_lanes
        n_dec = len(dl)
        if n_dec != st.n_decoding and st.grown:
            st.phases_off()  # some lane grown for this step does not take it
        if not n_dec:
            st.grown = 0  # (every lane grown in this plan was preempted)
        sc = st.decode_ctx
        ctx = sc[1] if sc is not None and sc[0] is dl else None  # the contexts the scheduler gathered
        st.decode_ctx = None
        remaining = None
        if not n_dec:
            first_done = 0
        elif n_dec == st.n_decoding and (st._ends is not None or batch.stable):
            first_done = st.first_stop()  # every lane steps: the stop clocks' heap
        else:
            if ctx is None:
                ctx = st.decode_contexts(dl)
            if dl is st._decode_array:  # the stop points, gathered once per set of lanes
                stop = st._decode_stop
                if stop is None:
                    stop = st._decode_stop = st.stop_ctx[dl]
            else:
                stop = st.stop_ctx[dl]
            remaining = stop - ctx  # decode steps to each lane's last token (>= 1)
            first_done = int(_min(remaining))
        return StepBatch(st, dl, batch.prefill_lanes, batch.prefill_tokens, ctx), first_done, remaining

    def _apply(self, batch: Batch, b: StepBatch, k: int, now: float, t_first: float, t: float, first_done: int,
               remaining: np.ndarray | None) -> None:
        """k iterations of `batch` ran from `now` for t seconds: tokens advance, KV grows, first
        tokens, gaps and completions are recorded."""
        st, kv = self.state, self.kv
        end = now + t
        st.now_s = end
        if self.check_invariants and end < self.last_clock_s:
            raise AssertionError("the clock went back")
        self.last_clock_s = end
        dl, pl = batch.decode_lanes, batch.prefill_lanes
        n_dec = b.n_decode
        n_seqs = n_dec + len(pl)
        self.batch_steps += k
        self.batch_seq_steps += k * n_seqs
        if n_seqs > self.batch_max:
            self.batch_max = n_seqs
        finished: list[int] = []
        # when the client sees this event's last tokens (its completions, its first tokens): after the host stage
        seen = end if self.host is None else self.host.emit(now, end, t_first, n_dec, b.prefill_ends() if pl else (), k)
        if n_dec:
            if self.skipped_decodes or k > 1:
                self._record_decode_gaps(dl, now, t_first, t, k)
            else:
                self.gaps.add(t_first, 0.0, 1, n_dec)
            finished = self._advance_decodes(b, k, end, first_done, remaining)
        self.skipped_decodes = n_dec < st.n_decoding
        if pl:
            self._apply_prefill(batch, end, finished, seen)
        if st.used_tokens > self.peak_used_tokens:
            self.peak_used_tokens = st.used_tokens
        # Peak of reserved KV: allocation happens in plan (admission, growth) and in apply (a
        # fast-forwarded run's blocks) and nothing is freed between them, so after apply is the peak.
        reserved = (kv.total_blocks - kv.free_blocks) * kv.block_size  # kv.reserved_tokens, minus two property calls
        if reserved > self.peak_reserved_tokens:
            self.peak_reserved_tokens = reserved
        if self.iterations.enabled:
            self.iterations.add(now, t, k, len(pl), sum(batch.prefill_tokens), n_dec,
                                st.used_tokens, reserved, len(st.waiting), len(st.running))
        for lane in finished:
            p = st.finish(lane, seen)
            self.source.done(p.request, seen)
        if self.check_invariants:
            st.write_blocks()
            kv.check()

    def _advance_decodes(self, b: StepBatch, k: int, end: float, first_done: int,
                         remaining: np.ndarray | None) -> list[int]:
        """The decoding lanes take k tokens each (their KV grown for the run's steps after the first);
        returns the lanes whose last token came within them."""
        st, kv = self.state, self.kv
        dl, n_dec = b.decode_lanes, b.n_decode
        st.decode_ctx_sum += k * n_dec
        st.used_tokens += k * n_dec
        if k > 1 and kv.grows_on_decode:
            if st.phases_ok and n_dec == st.n_decoding:  # blocks counted from the phases, not written
                kv.take_blocks(self._run_blocks(dl, b, k))
            elif not kv.grow_by(dl, b.decode_ctx(), k):  # pragma: no cover - _run_length bounds k
                raise AssertionError("fast-forward ran past the KV cache")
        if first_done > k:
            finished = []
        else:
            finished = st.stops_within(k) if remaining is None else dl[remaining <= k].tolist()
        if n_dec == st.n_decoding:
            st.step_all(k, end)  # the clock moves every lane's context
        else:
            st.step_some(dl, k, end)
        return finished

    def _run_blocks(self, dl, b: StepBatch, k: int) -> int:
        """Blocks a fast-forwarded run of k decode steps adds to all the decoding lanes, counted from
        the block phases (`ReplicaState.blocks_for_steps`; checked against the allocator's own count
        under `check_invariants`)."""
        total = self.state.blocks_for_steps(k)
        if self.check_invariants:
            self.state.write_blocks()
            if total != self.kv.grow_blocks_needed(dl, b.decode_ctx() + k):
                raise AssertionError("block phases disagree with the allocator on a run's growth")
        if total > self.kv.free_blocks:  # pragma: no cover - _run_length bounds k
            raise AssertionError("fast-forward ran past the KV cache")
        return total

    def _run_length(self, batch: Batch, b: StepBatch, first_done: int, now_s: float) -> tuple[int, float | None]:
        """Decode steps the batch can run unchanged: up to its first completion (`first_done`
        steps away), the last step the KV cache can hold, the last step before a growth evicts a
        prefix-cached block (when a waiting request could be admitted), the step model's
        `run_limit`, and the first step ending at or after the next arrival (when an arrival
        could be admitted). With the run's seconds when they were priced on the way (else None)."""
        st = self.state
        dl = batch.decode_lanes
        k = first_done
        if k <= 1:
            return 1, None
        # With requests waiting for a lane, the head is retried every iteration and keeps failing
        # while the free blocks only shrink -- unless a growth evicts a cached block: the head's
        # prefix hit may then shrink, and a shorter hit can need fewer blocks (a hit revives its
        # unreferenced cached blocks, which counted as free) and be admitted. So the run stops
        # before the first step whose growth would evict a cached block.
        cache = self.kv.prefix
        keep = len(cache.unreferenced) if cache is not None and self.scheduler.waiting_may_be_admitted(st) else 0
        if st.phases_ok and len(dl) == st.n_decoding:
            avail = st.steps_available(k, keep)
            if self.check_invariants:
                st.write_blocks()
                if avail != self.kv.decode_steps_available(dl, b.decode_ctx(), k, keep):
                    raise AssertionError("block phases disagree with the allocator on the steps available")
            k = max(1, min(k, avail))
        else:
            k = max(1, min(k, self.kv.decode_steps_available(dl, b.decode_ctx(), k, keep)))
        if k > 1:
            # e.g. padded KV views (CostModel.padded_kv): stop where a pass's view grows a block, so
            # every step of the run costs the same (the per-step gaps assume a linear run)
            limit = self.step_model.run_limit(b)
            if limit is not None:
                k = max(1, min(k, limit))
        if k > 1 and self.gate is not None:
            # an arrival is read only by a polling pass: stop there while one waits or may still come
            if self.inbox or self.source.next_time() is not None:
                k = min(k, self.gate.steps_to_read())
            return k, None
        if k > 1 and self.scheduler.arrival_may_change_plan(st):
            t_next = self.source.next_time()
            if t_next is not None:
                budget = t_next - now_s
                t = self.step_model.run_time(b, k)
                if t <= budget:  # the whole run ends by the arrival: `steps_within` would say k
                    return k, t
                kw = self.step_model.steps_within(b, budget, k)
                if kw < k:
                    # Stop at the first step ending after the arrival, where a step-by-step run
                    # admits it. (A step ending exactly at the arrival — a tie of two float sums —
                    # is counted as before it.)
                    k = kw + 1
        return k, None

    def _record_decode_gaps(self, dl: np.ndarray, start_s: float, t_first: float, total_s: float, k: int) -> None:
        """ITL of the tokens this run produces: k steps of B gaps, step j lasting
        t_first + j * delta (linear in j: each step reads one more token of KV per sequence)."""
        st = self.state
        n = len(dl)
        delta = (2.0 * total_s / k - 2.0 * t_first) / (k - 1) if k > 1 else 0.0
        if self.skipped_decodes:
            stall = start_s - st.last_tokens(dl)
            late = stall > 0
            n_late = int(late.sum())
            if n_late:
                self.gaps.add_singles(t_first + stall[late])  # a record of its own per late lane, in lane order
                self.gaps.add(t_first, 0.0, 1, n - n_late)
                self.gaps.add(t_first + delta, delta, k - 1, n)
                return
        self.gaps.add(t_first, delta, k, n)

    def _apply_prefill(self, batch: Batch, end_s: float, finished: list[int], seen_s: float | None = None) -> None:
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
                log.first_token_s[p.row] = end_s if seen_s is None else seen_s
            else:  # recomputed after a preemption: the client waited since its last token
                self.gaps.add(end_s - p.last_token_s, 0.0, 1, 1)
            if st.ctx[lane] >= st.stop_ctx[lane]:
                finished.append(lane)
