"""What a replica holds between iterations: its queue (`Pending`) and the running lanes and KV
cache (`ReplicaState`) the scheduler reads and admits into (the arrival stream it reads from is
`workloads.arrivals.ArrivalSource`).

Running sequences live in *lanes*: parallel numpy arrays indexed by a small integer, so a decode
batch's contexts are one fancy-indexing away and no per-token or per-sequence Python loop runs on
the hot path. The loop that drives them is `sim.engine.replica.Replica`.
"""

from __future__ import annotations

import heapq
from collections import deque

import numpy as np

from sim.engine.kv import BlockPhases, KVAllocator
from sim.engine.metrics import STATUS_COMPLETED, RequestLog
from workloads.request import Request


class Pending:
    """A request waiting for admission (new, or preempted and waiting to be recomputed)."""

    __slots__ = ("row", "request", "prompt_tokens", "max_tokens", "output_tokens", "generated", "last_token_s",
                 "keys", "transferred")

    def __init__(self, row: int, request: Request) -> None:
        self.row = row
        self.request = request
        self.prompt_tokens = request.prompt_tokens
        self.max_tokens = request.max_tokens
        self.output_tokens = request.output_tokens  # the replica's secret: when EOS comes
        self.generated = 0  # tokens already streamed to the client (recompute keeps them)
        self.last_token_s = 0.0
        self.keys = None  # prefix-cache block keys, computed on first lookup
        self.transferred = 0  # prompt tokens whose KV another node computed (disaggregated decode)

    @property
    def prefill_goal(self) -> int:
        """Tokens to compute before the next token comes out: the prompt, plus (after a
        preemption by recompute) every token generated so far (vLLM recomputes prompt + output)."""
        return self.prompt_tokens + self.generated


class ReplicaState:
    """Queue, running lanes and KV cache of one replica: what the scheduler reads and admits into."""

    def __init__(self, kv: KVAllocator, log: RequestLog, lanes: int, prefix=None) -> None:
        self.kv = kv
        self.log = log
        # sim.engine.prefix_cache: BlockPrefixCache (also kv.prefix) or SlotPromptCache, None when off
        self.prefix = prefix
        self.waiting: deque[Pending] = deque()
        n = max(1, lanes)
        kv.ensure_lanes(n)
        self.ctx = np.zeros(n, dtype=np.int64)  # tokens in this lane's KV (a decoding lane's: see `cbase`)
        self.prefill_goal = np.zeros(n, dtype=np.int64)  # tokens in KV when the next token comes out
        self.prompt = np.zeros(n, dtype=np.int64)
        self.stop_ctx = np.zeros(n, dtype=np.int64)  # replica-only: KV length when generation ends
        self.last_token_s = np.zeros(n, dtype=np.float64)  # (a decoding lane's: see `t_join`)
        self.active = np.zeros(n, dtype=bool)
        self.is_decoding = np.zeros(n, dtype=bool)
        self.admit_seq = np.zeros(n, dtype=np.int64)  # admission order (oldest = smallest)
        self._admissions = 0
        self.pending: list[Pending | None] = [None] * n
        self.free_lanes = list(range(n))  # a heap: the lowest free lane is handed out first
        self.lane_top = 0  # 1 + the highest lane ever used: lanes above it are all idle
        self.running: list[int] = []  # admission order, oldest first
        self.prefilling: list[int] = []  # running lanes still computing their prompt, oldest first
        self.n_decoding = 0
        self.decode_ctx_sum = 0  # sum of the decoding lanes' contexts (the decode batch's lines need only it)
        self._decode_array: np.ndarray | None = None
        self._decode_stop: np.ndarray | None = None  # stop_ctx[_decode_array] (stop_ctx is fixed while a lane decodes)
        self.decode_ctx: tuple | None = None  # (lanes, contexts) the scheduler gathered this iteration
        # The decoding lanes, one representation: `decode_clock` counts the decode steps every
        # decoding lane took together, and a decoding lane's context is cbase[lane] + decode_clock
        # (cbase: its context when it joined minus the clock then; a step that only some lanes take
        # adds to theirs), its last token's time the later of t_join[lane] (its joining, or its last
        # step that not every lane took) and `last_step_s` (the end of the last step all took). So
        # a decode event writes no per-lane array: `ctx` and `last_token_s` of a decoding lane are
        # written when it is read (`_settle`: it leaves or is preempted).
        self.decode_clock = 0
        self.cbase = np.zeros(n, dtype=np.int64)
        self.t_join = np.zeros(n, dtype=np.float64)
        self.last_step_s = float("-inf")
        # Blocks of the decoding lanes (paged KV): the allocator's `held` array, or, while
        # `phases_ok`, its `BlockPhases` (this state only calls their arithmetic): a decoding lane
        # holding exactly the blocks its context needs sits in bucket (context - decode_clock) mod
        # block_size, which stays its bucket while it steps with the clock, and holds
        # ceil((context + grown) / block_size) blocks (`grown`: the scheduler gave this plan's step
        # its blocks and the replica has not applied it yet), written into `held` when it is read
        # (`write_blocks`, `_settle`). `phases_ok` turns off for the run once a lane breaks that (it
        # skipped a step it had grown for, or joined holding more blocks): the blocks are then
        # written into `held` (`phases_off`) and every growth is the allocator's `grow_by`.
        self.phases_ok = kv.grows_on_decode
        self.phases = BlockPhases(kv.block_size) if self.phases_ok else None
        self.grown = 0
        # Stop clocks: a decoding lane's last token comes at clock stop_ctx - cbase, which does not
        # change while it steps with the clock; a heap of them (pruned lazily: `_end_of` holds the
        # live ones) gives the batch's first completion (`first_stop`) and the lanes a run finishes
        # (`stops_within`). A step that only some lanes take moves theirs: the heap is dropped
        # (None) and built again when a batch of all the decoding lanes next needs it.
        self._ends: list[tuple[int, int]] | None = []
        self._end_of: dict[int, int] | None = {}
        self.used_tokens = 0  # sum of the contexts over running lanes
        self.preemptions = 0
        self.now_s = 0.0

    @property
    def n_running(self) -> int:
        return len(self.running)

    def decode_lanes(self) -> np.ndarray:
        """Lanes past their prefill, in lane order (cached until the set changes)."""
        if self._decode_array is None:
            self._decode_array = self.is_decoding[: self.lane_top].nonzero()[0]  # np.flatnonzero, minus a wrapper
        return self._decode_array

    def decode_contexts(self, lanes: np.ndarray) -> np.ndarray:
        """The contexts of these decoding lanes (a fresh int64 array)."""
        return self.cbase[lanes] + self.decode_clock

    def contexts(self, lanes: np.ndarray) -> np.ndarray:
        """The contexts of these running lanes, decoding or not (a fresh int64 array)."""
        return np.where(self.is_decoding[lanes], self.cbase[lanes] + self.decode_clock, self.ctx[lanes])

    def start_decoding(self, lane: int) -> None:
        c = int(self.ctx[lane])
        if self.phases_ok and not self.kv.holds_exactly(lane, c):
            self.phases_off()
        self.prefilling.remove(lane)
        self.is_decoding[lane] = True
        self.n_decoding += 1
        self._decode_array = self._decode_stop = None
        self.decode_ctx_sum += c
        self.cbase[lane] = c - self.decode_clock
        self.t_join[lane] = self.last_token_s[lane]
        if self._ends is not None:
            e = int(self.stop_ctx[lane]) - c + self.decode_clock
            self._end_of[lane] = e
            heapq.heappush(self._ends, (e, lane))
        if self.phases_ok:
            self.phases.join(lane, c, self.decode_clock)

    def write_blocks(self) -> None:
        """With `phases_ok`: write every decoding lane's blocks into the allocator's `held` (for a
        reader of `held`: `grow_by`, the invariant checks)."""
        if self.phases_ok and self.n_decoding:
            dl = self.decode_lanes()
            self.kv.hold_for(dl, self.cbase[dl] + (self.decode_clock + self.grown))

    def phases_off(self) -> None:
        """The decoding lanes' blocks leave the phases for good: written into `held`, which every
        later growth reads (`phases_ok` above)."""
        if self.phases_ok:
            self.write_blocks()
            self.phases_ok = False
            self.phases = None

    def _settle(self, lane: int) -> None:
        """Write a decoding lane's context, blocks (with `phases_ok`) and last token's time into the
        arrays: it is about to be read (it leaves or is preempted)."""
        if self.is_decoding[lane]:
            c = int(self.cbase[lane]) + self.decode_clock
            self.ctx[lane] = c
            if self.phases_ok:
                self.kv.hold_for(lane, c + self.grown)
            t = float(self.t_join[lane])
            self.last_token_s[lane] = t if t >= self.last_step_s else self.last_step_s

    def last_tokens(self, lanes: np.ndarray) -> np.ndarray:
        """When each of these decoding lanes produced its last token."""
        return np.maximum(self.t_join[lanes], self.last_step_s)

    def boundary_lanes(self) -> list[int]:
        """With `phases_ok`: the decoding lanes whose context fills their last block (ctx a
        multiple of the block size), i.e. those that need one more block for their next token
        (`grow_by(lanes, ctx, 1)` gives each exactly one, the others none); in joining order."""
        return self.phases.boundary(self.decode_clock)

    def step_all(self, k: int, end_s: float) -> None:
        """Every decoding lane took k decode steps, the last ending at `end_s`: the clock moves."""
        self.decode_clock += k
        self.last_step_s = end_s
        self.grown = 0

    def step_some(self, lanes: np.ndarray, k: int, end_s: float) -> None:
        """Only `lanes` (not every decoding lane) took k decode steps, the last ending at `end_s`:
        their bases move, their stop clocks and block phases no longer hold (the others may hold a
        block grown for a step they did not take)."""
        self.phases_off()
        self.cbase[lanes] += k
        self.t_join[lanes] = end_s
        self._ends = self._end_of = None
        self.grown = 0

    def _stop_clocks(self) -> list[tuple[int, int]]:
        """The stop clocks' heap, built again from the arrays if a partial step dropped it."""
        if self._ends is None:
            dl = self.decode_lanes()
            lanes, ends = dl.tolist(), (self.stop_ctx[dl] - self.cbase[dl]).tolist()
            self._end_of = dict(zip(lanes, ends))
            self._ends = list(zip(ends, lanes))
            heapq.heapify(self._ends)
        return self._ends

    def first_stop(self) -> int:
        """Decode steps to the first completion among the decoding lanes (some decoding):
        min(stop_ctx - context) over them."""
        ends = self._ends
        if ends is None:
            ends = self._stop_clocks()
        end_of = self._end_of
        while True:
            e, lane = ends[0]
            if end_of.get(lane) == e:
                return e - self.decode_clock
            heapq.heappop(ends)

    def stops_within(self, k: int) -> list[int]:
        """The decoding lanes whose last token comes within k more steps of all of them (the clock
        not yet moved), in lane order: those with stop_ctx - context <= k."""
        ends = self._ends
        if ends is None:
            ends = self._stop_clocks()
        end_of = self._end_of
        limit = self.decode_clock + k
        out = set()
        while ends and ends[0][0] <= limit:
            e, lane = heapq.heappop(ends)
            if end_of.get(lane) == e:
                out.add(lane)
        return sorted(out)

    def steps_available(self, max_steps: int, keep_free_blocks: int) -> int:
        """`KVAllocator.decode_steps_available` for all the decoding lanes, right after the
        scheduler grew them for one step (with `phases_ok`): the allocator's `BlockPhases`."""
        return self.phases.steps_available(self.n_decoding, self.kv.free_blocks - keep_free_blocks,
                                           self.decode_clock, max_steps)

    def blocks_for_steps(self, k: int) -> int:
        """Blocks all the decoding lanes need for k - 1 more steps after the scheduler grew them
        for one (with `phases_ok`; the clock not yet moved): the allocator's `BlockPhases`."""
        return self.phases.blocks_for_steps(self.n_decoding, k, self.decode_clock)

    def check_lanes(self) -> None:
        """The context sum, the stop clocks and the block phases against the lanes' contexts (the
        replica's `check_invariants`, before each plan; writes the blocks into `held`)."""
        dl = self.decode_lanes()
        lanes, ctx = dl.tolist(), self.decode_contexts(dl).tolist()
        if self.decode_ctx_sum != sum(ctx):
            raise AssertionError("decode_ctx_sum out of step with the decoding lanes' contexts")
        if self._ends is not None:
            if sorted(self._end_of) != lanes:
                raise AssertionError("stop clocks out of step with the decoding lanes")
            for lane, c in zip(lanes, ctx):
                if self._end_of[lane] != int(self.stop_ctx[lane]) - c + self.decode_clock:
                    raise AssertionError(f"lane {lane}: stop clock out of step")
        if self.phases_ok:
            self.write_blocks()
            self.phases.check(lanes, ctx, self.kv, self.decode_clock)

    def _grow_lanes(self) -> None:
        old = len(self.ctx)
        new = 2 * old
        for name in ("ctx", "prefill_goal", "prompt", "stop_ctx", "last_token_s", "active", "is_decoding", "admit_seq",
                     "cbase", "t_join"):
            a = getattr(self, name)
            b = np.zeros(new, dtype=a.dtype)
            b[:old] = a
            setattr(self, name, b)
        self.pending.extend([None] * old)
        self.free_lanes.extend(range(old, new))  # all above the free lanes already there: still a heap
        self.kv.ensure_lanes(new)

    def prefix_hit(self, p: Pending) -> int:
        """Leading prompt tokens of `p` whose KV the prefix cache holds (0 without a cache); the
        cache does not change until `admit`."""
        if p.transferred:
            return p.transferred
        cache = self.prefix
        if cache is None:
            return 0
        r = p.request
        if r.prefix_id is None and r.prefix_blocks is None:
            return 0
        if cache.kind == "blocks":
            if p.keys is None:
                from sim.engine.prefix_cache import block_keys

                p.keys = block_keys(r, cache.block_size)
            return cache.lookup(p.keys, p.prompt_tokens) * cache.block_size
        return cache.peek(r)

    def admit(self, p: Pending, reserve_tokens: int, context_limit: int | None, hit_tokens: int = 0) -> int | None:
        """Move the waiting head `p` into a lane holding `reserve_tokens` of KV, its first
        `hit_tokens` (`prefix_hit`) served by the prefix cache; None if the KV cache cannot give
        that now (nothing changes then)."""
        if not self.free_lanes:
            self._grow_lanes()
        lane = self.free_lanes[0]  # the lowest free lane (llama-server's first idle slot)
        cache = None if p.transferred else self.prefix  # transferred KV is the lane's own
        blocks = cache is not None and cache.kind == "blocks"
        if blocks and hit_tokens:
            self.kv.acquire_prefix(lane, p.keys[: hit_tokens // cache.block_size])
        if not self.kv.reserve(lane, reserve_tokens):
            if blocks and hit_tokens:
                self.kv.release(lane)
            return None
        if cache is not None:
            if not blocks:
                hit_tokens = cache.take(p.request, self.n_running)
            cache.stats.record(p.prompt_tokens, hit_tokens)
        heapq.heappop(self.free_lanes)
        if lane >= self.lane_top:
            self.lane_top = lane + 1
        self.waiting.popleft()
        self.ctx[lane] = hit_tokens
        self.used_tokens += hit_tokens
        self.prefill_goal[lane] = p.prefill_goal
        self.prompt[lane] = p.prompt_tokens
        # EOS after output_tokens tokens, the client's max_tokens, or the engine's context limit
        stop = p.prompt_tokens + min(p.output_tokens, p.max_tokens) - 1
        if context_limit is not None:
            stop = min(stop, context_limit)
        self.stop_ctx[lane] = max(stop, p.prefill_goal)
        self.last_token_s[lane] = p.last_token_s
        self.active[lane] = True
        self.admit_seq[lane] = self._admissions
        self._admissions += 1
        self.pending[lane] = p
        self.running.append(lane)
        self.prefilling.append(lane)
        row = p.row
        if self.log.scheduled_s[row] != self.log.scheduled_s[row]:  # NaN: first admission
            self.log.scheduled_s[row] = self.now_s
        return lane

    def _vacate(self, lane: int) -> None:
        self.active[lane] = False
        c = int(self.ctx[lane])
        self.used_tokens -= c
        self.kv.release(lane)
        self.running.remove(lane)
        if self.is_decoding[lane]:
            self.is_decoding[lane] = False
            self.n_decoding -= 1
            self.decode_ctx_sum -= c
            self._decode_array = self._decode_stop = None
            if self._end_of is not None:
                self._end_of.pop(lane, None)
            if self.phases is not None:
                self.phases.leave(lane)
        else:
            self.prefilling.remove(lane)
        self.pending[lane] = None
        heapq.heappush(self.free_lanes, lane)

    def preempt_newest(self) -> int:
        """Preempt (recompute) the most recently admitted running sequence; it goes back to the
        front of the queue with the tokens it has already streamed. Returns its lane."""
        lane = self.running[-1]
        p = self.pending[lane]
        self._settle(lane)
        if self.ctx[lane] >= self.prefill_goal[lane]:
            p.generated = int(self.ctx[lane] - self.prompt[lane] + 1)
        p.last_token_s = float(self.last_token_s[lane])
        self._vacate(lane)
        self.waiting.appendleft(p)
        self.preemptions += 1
        self.log.preemptions[p.row] += 1
        return lane

    def finish(self, lane: int, now_s: float) -> Pending:
        p = self.pending[lane]
        self._settle(lane)
        row = p.row
        log = self.log
        log.finish_s[row] = now_s
        ctx = int(self.ctx[lane])
        log.output_tokens[row] = ctx - int(self.prompt[lane]) + 1
        log.status[row] = STATUS_COMPLETED
        if ctx < p.prompt_tokens + min(p.output_tokens, p.max_tokens) - 1:
            log.reason[row] = log.reason_code("truncated: the slot's context is full (llama-server stops generation)")
        self._vacate(lane)
        if self.prefix is not None and self.prefix.keeps_finished_prompts:
            self.prefix.put(p.request)
        return p
