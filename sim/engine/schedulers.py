"""Scheduling policies: what runs in the next engine iteration. They know policy, not physics.

A scheduler's `plan(state)` admits waiting requests (reserving KV through the allocator), preempts
when the paged cache runs dry, and returns a plain `Batch` — which sequences decode one token and
which prefill how many prompt tokens. It never computes time (the cost model prices the batch) and
never advances tokens (the replica applies the batch), the split of vLLM v1's
`Scheduler.schedule()` -> `SchedulerOutput` (vllm/v1/core/sched/scheduler.py).

Oracle boundary: a scheduler sees prompt lengths, the client's `max_tokens` and what has been
computed so far; it never sees the trace's true output length (the replica alone knows when a
sequence emits its end-of-sequence token).

Policies, picked by name from `SCHEDULERS`, which every subclass of `Scheduler` with a `name` of
its own joins when it is defined (also one written in a file of its own: docs/contributing.md); its
name is then one that presets and `--scheduler` accept (`sim.catalog.policies`):
- `static`: batch up to `max_num_seqs` waiting requests, run them until every one has finished,
  then form the next batch (Hugging Face `generate()` on a padded batch).
- `continuous`: iteration-level admission (Orca, OSDI 2022; vLLM v0 and TGI): when waiting requests
  fit, one iteration prefills their whole prompts; otherwise every running sequence decodes.
- `chunked`: continuous batching with a per-iteration token budget (`max_num_batched_tokens`):
  every decode takes one token first, then prefill chunks (unfinished prefills first, then new
  admissions) fill what is left (Sarathi-Serve, OSDI 2024; vLLM v1's default).
- `inflight`: TensorRT-LLM's in-flight batching without chunked context: decodes and whole prompts
  share an iteration, up to the token budget (`InflightBatching`).
- `prefill_first`: SGLang's default: a prefill batch (chunked at the budget) whenever one can be
  formed, otherwise a decode batch; never mixed (`PrefillFirst`).
- `sequential`: one request at a time, first come first served.
- `slots`: llama-server: `max_num_seqs` slots, each limited to the slot context (`context_size //
  max_num_seqs` for a split buffer), batched like `chunked` with `n_batch` =
  `max_num_batched_tokens`. A prompt of at least the slot's context is rejected, and generation
  stops when the slot is full (see `Slots`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from sim.catalog.policies import SCHEDULERS as POLICIES
from sim.catalog.policies import declare_scheduler
from sim.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from sim.engine.state import Pending, ReplicaState

_NO_LANES = np.zeros(0, dtype=np.int64)

#: Every scheduling policy by name (filled by `Scheduler.__init_subclass__`).
SCHEDULERS: dict[str, type["Scheduler"]] = {}


@dataclass(slots=True)
class Batch:
    """What one engine iteration computes.

    `prefill_lanes[i]` computes `prefill_tokens[i]` prompt (or recompute) tokens; every lane in
    `decode_lanes` computes one token. `stable` says that, as long as no request arrives, finishes
    or runs out of KV blocks, the scheduler would plan this same decode batch again — which lets
    the replica fast-forward a run of identical decode iterations in one event. A plan that
    preempted is never stable: the next plan offers the freed lane and blocks to the waiting head.
    """

    prefill_lanes: list[int]
    prefill_tokens: list[int]
    decode_lanes: np.ndarray
    stable: bool = False

    @property
    def empty(self) -> bool:
        return not self.prefill_lanes and not len(self.decode_lanes)


class Scheduler:
    """Base policy: admission checks shared by every scheduler, and the paged-KV growth step.

    A subclass that sets `name` is registered in `SCHEDULERS` under it and declared to the catalog
    with its `per_slot_context` (`sim.catalog.policies.declare_scheduler`)."""

    name: ClassVar[str] = ""
    #: whether each of `max_num_seqs` slots owns a share of the server's context and a request may hold at
    #: most its slot's (llama-server's slots: `EngineConfig.context_limits` gives `context_tokens`)
    per_slot_context: ClassVar[bool] = False
    #: whether a prompt must fit in one iteration's token budget (no chunking)
    whole_prompt: ClassVar[bool] = True
    #: whether a whole prompt that does not fit what the budget has left waits even when it would be the
    #: iteration's only prefill (TensorRT-LLM's MicroBatchScheduler stops at max_num_tokens)
    strict_budget: ClassVar[bool] = False

    @classmethod
    def __init_subclass__(cls, **kw) -> None:
        super().__init_subclass__(**kw)
        if cls.__dict__.get("name"):
            declare_scheduler(cls.name, per_slot_context=cls.per_slot_context)
            SCHEDULERS[cls.name] = cls

    def __init__(self, *, max_num_seqs: int, max_num_batched_tokens: int | None, context_tokens: int,
                 shared_slots: bool = False, new_token_ratio=None, watermark: float = 0.0,
                 batch_wait: tuple[int, float] = (0, 0.0)) -> None:
        if max_num_seqs < 1:
            raise ConfigError(f"must be >= 1, got {max_num_seqs}", field="--max-seqs")
        self.max_seqs = int(max_num_seqs)
        self.token_budget = int(max_num_batched_tokens) if max_num_batched_tokens else math.inf
        self.context_tokens = int(context_tokens)
        # vLLM V0: a prompt is admitted only if its blocks leave this share of all blocks free
        self.watermark = float(watermark)
        # SGLang's reservation for tokens not yet generated (EngineConfig.new_token_ratio); None: vLLM's
        # admission, which reserves only the blocks of the chunk it computes
        self.ntr = new_token_ratio
        # TensorRT-LLM's batch waiting (EngineConfig.batch_wait_iters / batch_wait_tokens_ratio; `_holds_prompts`)
        self.wait_iters, self.wait_ratio = int(batch_wait[0]), float(batch_wait[1])
        self.waited = 0  # iterations the prompts have been held so far (py_executor batch_wait_iters_count)
        if new_token_ratio is not None:
            self.ratio_min = new_token_ratio.init * new_token_ratio.min_factor
            self.ratio_decay = (new_token_ratio.init - self.ratio_min) / new_token_ratio.decay_steps
            self._ratio_base = new_token_ratio.init  # ratio when the decay last restarted
            self._ratio_clock = 0  # state.decode_clock then
            self._max_new = np.zeros(64, dtype=np.int64)  # max_tokens of the request in each lane

    # ---- SGLang's new-token reservation ----------------------------------------------------------
    def new_token_ratio(self, state: "ReplicaState") -> float:
        """SGLang's `new_token_ratio` now: it falls by (init - min) / decay_steps per decode step
        (`update_running_batch`: max(ratio - decay, min)) from its last restart."""
        steps = state.decode_clock - self._ratio_clock
        return max(self._ratio_base - self.ratio_decay * steps, self.ratio_min)

    def _restart_ratio(self, state: "ReplicaState", ratio: float) -> None:
        self._ratio_base = ratio
        self._ratio_clock = state.decode_clock

    def _running_generated(self, state: "ReplicaState", lanes: "np.ndarray | slice") -> np.ndarray:
        """Tokens each lane of `lanes` (indices, or a slice of lanes) has generated (0 while it reads its prompt)."""
        return np.where(state.is_decoding[lanes], state.contexts(lanes) - state.prompt[lanes] + 1, 0)

    def _ratio_room(self, state: "ReplicaState") -> float:
        """SGLang PrefillAdder's `rem_total_tokens`: free KV tokens (cached blocks nobody uses count
        as free: the radix cache evicts them) minus, for each running request, new_token_ratio x
        min(max_new_tokens - generated, clip)."""
        free = state.kv.free_blocks * state.kv.block_size
        if not state.running:
            return float(free)
        # Every lane below `lane_top` at once, the idle ones masked out (`active`: the running lanes): the
        # same integer sum as over `running`, without gathering the lanes from a list each plan
        top = state.lane_top
        if len(self._max_new) < top:  # (a lane never admitted here: masked out below)
            self._max_new = np.concatenate([self._max_new, np.zeros(top - len(self._max_new), dtype=np.int64)])
        left = self._max_new[:top] - self._running_generated(state, slice(0, top))
        np.clip(left, 0, self.ntr.clip_max_new_tokens, out=left)
        return free - self.new_token_ratio(state) * float(left[state.active[:top]].sum())

    def _retracted(self, state: "ReplicaState") -> None:
        """After a retraction (decode ran out of KV): SGLang's `retract_decode` sets the ratio to
        (tokens decoded + retract_decode_steps x n) / sum of max_new_tokens over the batch that
        stays, at most 1."""
        if not state.running:
            self._restart_ratio(state, self.ntr.init)
            return
        lanes = np.fromiter(state.running, dtype=np.int64, count=len(state.running))
        decoded = float(self._running_generated(state, lanes).sum())
        total = float(self._max_new[lanes].sum())
        est = (decoded + self.ntr.retract_steps * len(lanes)) / total if total > 0 else 1.0
        self._restart_ratio(state, min(1.0, est))

    # ---- admission ------------------------------------------------------------------------------
    def admission_error(self, prompt_tokens: int, max_tokens: int, state: "ReplicaState") -> str | None:
        """Why a request can never be served by this engine (None if it can). Uses the client's
        `max_tokens`, never the true output length."""
        need = prompt_tokens + max_tokens
        if need > self.context_tokens:
            return (f"prompt + max_tokens = {need} tokens exceeds the context limit of {self.context_tokens} "
                    "tokens (vLLM: max_model_len)")
        if not state.kv.fits_ever(self.reservation_budget(prompt_tokens, max_tokens)):
            return (f"prompt + max_tokens = {need} tokens can never fit in the KV cache "
                    f"({state.kv.capacity_tokens} tokens)")
        if self.whole_prompt and prompt_tokens > self.token_budget:
            return (f"prompt of {prompt_tokens} tokens exceeds max_num_batched_tokens = {self.token_budget} "
                    f"and the {self.name} scheduler does not chunk prefills")
        return None

    def reservation_budget(self, prompt_tokens: int, max_tokens: int) -> int:
        """The most KV tokens a request may ever hold (what a contiguous allocator reserves)."""
        return prompt_tokens + max_tokens

    def context_limit(self) -> int | None:
        """Context length at which the engine stops a generation (None: only max_tokens stops it)."""
        return None

    def arrival_may_change_plan(self, state: "ReplicaState") -> bool:
        """Whether a request arriving now could be admitted at the next iteration. With requests
        already waiting it cannot: admission is first come first served, so the head goes first."""
        return not state.waiting and state.n_running < self.max_seqs

    def waiting_may_be_admitted(self, state: "ReplicaState") -> bool:
        """Whether the next iteration tries to admit the waiting head (a lane is free). Its
        outcome then depends on the KV cache: on the free blocks and, with prefix caching, on
        which of the head's blocks are still cached."""
        return bool(state.waiting) and state.n_running < self.max_seqs

    def plan(self, state: "ReplicaState") -> Batch:  # pragma: no cover - abstract
        raise NotImplementedError

    # ---- shared steps ---------------------------------------------------------------------------
    def _admit(self, state: "ReplicaState", p: "Pending", chunk: int, hit: int = 0) -> int | None:
        """Admit the waiting head `p` computing `chunk` tokens first after `hit` tokens the prefix
        cache serves; None if KV does not allow."""
        reserve = state.kv.admission_tokens(p.prompt_tokens, self.reservation_budget(p.prompt_tokens, p.max_tokens),
                                            hit + chunk)
        lane = state.admit(p, reserve, self.context_limit(), hit)
        if lane is not None and self.ntr is not None:
            if lane >= len(self._max_new):
                grown = np.zeros(max(lane + 1, 2 * len(self._max_new)), dtype=np.int64)
                grown[: len(self._max_new)] = self._max_new
                self._max_new = grown
            self._max_new[lane] = p.max_tokens
        return lane

    def _grow_decodes(self, state: "ReplicaState") -> np.ndarray:
        """Give every decoding lane room for one more token; when the paged cache has no free
        block, preempt the newest running sequence (recompute) until the rest fit — vLLM v1
        `Scheduler.schedule()`: `preempted_req = self.running.pop()`."""
        lanes = state.decode_lanes()
        if not len(lanes):
            return lanes
        kv = state.kv
        if state.phases_ok:
            # the lanes that need a block are those in the clock's phase (`ReplicaState.phases`):
            # each needs exactly one, so the growth is theirs alone, counted and not written
            # (the state writes a lane's blocks when it is read)
            need = state.boundary_lanes()
            if len(need) <= kv.free_blocks:
                state.grown = 1
                if need:
                    kv.take_blocks(len(need))
                return lanes
            state.write_blocks()  # grow_by reads the lanes' blocks
        elif not kv.grows_on_decode:
            return lanes  # (contiguous: `grow_by` gives nothing and never fails)
        ctx = state.decode_contexts(lanes)
        while len(lanes) and not kv.grow_by(lanes, ctx, 1):
            state.preempt_newest()
            keep = state.active[lanes]
            lanes = lanes[keep]
            ctx = ctx[keep]
        state.decode_ctx = (lanes, ctx)  # the replica prices this batch from the same gather
        state.grown = 1
        return lanes

    def _continue_prefills(self, state: "ReplicaState", lanes: list[int], tokens: list[int], budget: int) -> int:
        """The next chunk of every unfinished prefill, oldest first, while the token budget lasts
        (a lane preempted while an older one was served is skipped); appends to `lanes`/`tokens`
        and returns the budget left."""
        for lane in list(state.prefilling):
            if budget <= 0:
                break
            if not state.active[lane]:
                continue
            ctx = int(state.ctx[lane])
            chunk = int(min(state.prefill_goal[lane] - ctx, budget))
            if self._reserve_or_preempt(state, lane, ctx + chunk):
                lanes.append(lane)
                tokens.append(chunk)
                budget -= chunk
        return budget

    def _reserve_or_preempt(self, state: "ReplicaState", lane: int, tokens: int) -> bool:
        """Room for `lane` to hold `tokens`, preempting newer sequences if needed; False if the lane
        itself had to be preempted."""
        kv = state.kv
        while not kv.reserve(lane, tokens):
            if state.preempt_newest() == lane:
                return False
        return True

    def _admit_waiting(self, state: "ReplicaState", lanes: list[int], tokens: list[int], budget: float) -> None:
        """Admit waiting requests, first come first served, while lanes, KV and the token budget
        allow, appending each to `lanes`/`tokens`. A whole-prompt scheduler prefills each prompt (or
        recompute) at once — a lone one may exceed the budget, or a long recompute would never run;
        a chunking one gives the head whatever budget is left."""
        kv = state.kv
        waiting, running, max_seqs, whole = state.waiting, state.running, self.max_seqs, self.whole_prompt
        no_cache = state.prefix is None
        room = self._ratio_room(state) if self.ntr is not None and waiting and len(running) < max_seqs else None
        while waiting and len(running) < max_seqs:
            p = waiting[0]
            # prompt tokens whose KV is cached: not computed again (`prefix_hit`, 0 without a cache)
            hit = 0 if no_cache and not p.transferred else state.prefix_hit(p)
            goal = p.prompt_tokens + p.generated - hit  # p.prefill_goal - hit
            chunk = goal if whole else int(min(goal, budget))
            if chunk <= 0 or ((lanes or self.strict_budget) and chunk > budget):
                break
            if self.watermark and not p.transferred:
                # vLLM V0 BlockSpaceManager.can_allocate: the whole prompt's blocks (V0 allocates them at
                # admission, chunked or not) must leave watermark_blocks = watermark x total free
                if kv.blocks_for(goal) + int(self.watermark * kv.total_blocks) > kv.free_blocks:
                    break
            if room is not None:
                # SGLang admits while its uncached prompt plus min(max_new_tokens, clip) fits what the
                # running batch's reservations leave (PrefillAdder.add_one_req -> NO_TOKEN otherwise)
                need = goal + min(max(p.max_tokens - p.generated, 0), self.ntr.clip_max_new_tokens)
                if need > room:
                    break
                room -= need
            if not hit and state.free_lanes:
                # A saturated server retries its queue head every iteration and mostly fails: without
                # a prefix hit, `ReplicaState.admit` fails exactly when the head's blocks exceed the
                # free ones (a free lane holds no block), so that case is decided here, unchanged.
                reserve = kv.admission_tokens(p.prompt_tokens, self.reservation_budget(p.prompt_tokens, p.max_tokens),
                                              chunk)
                if kv.blocks_for(reserve) > kv.free_blocks:
                    break
            lane = self._admit(state, p, chunk, hit)
            if lane is None:
                break
            lanes.append(lane)
            tokens.append(chunk)
            budget -= chunk

    def _holds_prompts(self, state: "ReplicaState", n_decodes: int, budget: float) -> bool:
        """TensorRT-LLM's batch waiting (_torch/pyexecutor/py_executor.py `_waiting_requests`, PR #7416): while
        generation requests run, the prompts this iteration would schedule wait, up to `wait_iters` iterations,
        until their tokens plus one per generation request reach `wait_ratio` x max_num_tokens. The prompts
        it would schedule are the waiting ones, oldest first, that fit the lanes and the token budget left."""
        if self.wait_iters <= 0 or not n_decodes or not state.waiting:
            return False
        ctx, n, lanes = 0, 0, self.max_seqs - len(state.running)
        for p in state.waiting:
            need = p.prompt_tokens + p.generated
            if n >= lanes or ctx + need > budget:
                break
            ctx, n = ctx + need, n + 1
        if not n:
            return False  # no prompt fits this iteration: nothing to hold
        if self.waited >= self.wait_iters or ctx + n_decodes >= self.wait_ratio * self.token_budget:
            self.waited = 0
            return False
        self.waited += 1
        return True

    def _admit_whole_prompts(self, state: "ReplicaState") -> Batch:
        lanes: list[int] = []
        tokens: list[int] = []
        self._admit_waiting(state, lanes, tokens, self.token_budget)
        return Batch(lanes, tokens, _NO_LANES)


class StaticBatching(Scheduler):
    """Form a batch, run it until its slowest member finishes, then form the next."""

    name = "static"

    def arrival_may_change_plan(self, state: "ReplicaState") -> bool:
        return state.n_running == 0

    def waiting_may_be_admitted(self, state: "ReplicaState") -> bool:
        return False  # nobody joins a running batch

    def plan(self, state: "ReplicaState") -> Batch:
        if state.n_running:
            return Batch([], [], self._grow_decodes(state), stable=True)
        return self._admit_whole_prompts(state)


class Sequential(StaticBatching):
    """One request at a time, first come first served (a static batch of one)."""

    name = "sequential"

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.max_seqs = 1


class ContinuousBatching(Scheduler):
    """Iteration-level admission with separate prefill iterations (prefill first)."""

    name = "continuous"

    def plan(self, state: "ReplicaState") -> Batch:
        batch = self._admit_whole_prompts(state)
        if batch.prefill_lanes:
            return batch
        preempted_before = state.preemptions
        decodes = self._grow_decodes(state)
        # Admission ran before the growth: a sequence preempted by it frees a lane and blocks the
        # next plan offers to the waiting head (the preempted one, whose prompt blocks may be
        # cached) -- a plan this one never tried, so the batch is not known to repeat.
        return Batch([], [], decodes, stable=state.preemptions == preempted_before)


class ChunkedPrefill(Scheduler):
    """Per-iteration token budget: decodes first, then prefill chunks fill the rest."""

    name = "chunked"
    whole_prompt = False

    def plan(self, state: "ReplicaState") -> Batch:
        budget = self.token_budget
        preempted_before = state.preemptions
        if self.ntr is not None and not state.running:
            self._restart_ratio(state, self.ntr.init)  # SGLang: an idle server starts from init again
        decodes = self._grow_decodes(state)
        if not state.prefilling and not state.waiting and len(decodes) <= budget:
            return Batch([], [], decodes, stable=True)  # the common case: nothing but decodes
        stable = True
        if len(decodes) > budget:  # more decodes than the budget: serve the oldest ones
            decodes = np.sort(decodes[np.argsort(state.admit_seq[decodes], kind="stable")[: int(budget)]])
            stable = False
        budget -= len(decodes)
        lanes: list[int] = []
        tokens: list[int] = []
        budget = self._continue_prefills(state, lanes, tokens, budget)
        if state.preemptions != preempted_before:
            if self.ntr is not None:
                self._retracted(state)
            # Sequences preempted in this plan leave it; like vLLM v1, admit nobody new in an
            # iteration that had to preempt (so no lane is reused within one plan).
            decodes = decodes[state.active[decodes]]
            keep = [i for i, lane in enumerate(lanes) if state.active[lane]]
            return Batch([lanes[i] for i in keep], [tokens[i] for i in keep], decodes)
        if self._holds_prompts(state, len(decodes), budget):
            return Batch(lanes, tokens, decodes)  # (not stable: the hold ends within wait_iters iterations)
        self._admit_waiting(state, lanes, tokens, budget)
        return Batch(lanes, tokens, decodes, stable=stable and not lanes)


class InflightBatching(ChunkedPrefill):
    """TensorRT-LLM's in-flight batching without chunked context (`enable_chunked_prefill` False, its
    default): one iteration runs the generation requests' next tokens and whole context (prompt)
    requests together, up to `max_num_tokens` tokens and `max_batch_size` requests
    (batch_manager/microBatchScheduler.cpp: a generation request counts one token, a context request
    its whole prompt; a context request that would pass max_num_tokens waits). Running requests come
    first (they are the oldest), then new prompts in arrival order — the `chunked` policy with whole
    prompts."""

    name = "inflight"
    whole_prompt = True
    strict_budget = True


class PrefillFirst(ChunkedPrefill):
    """SGLang's default scheduling (`enable_mixed_chunk` False): an iteration is either a prefill
    (extend) batch or a decode batch, never both (managers/scheduler.py get_next_batch_to_run: a new
    prefill batch, when one can be formed, runs before the running batch's next decode step). The
    prefill batch continues the unfinished chunked request first, then admits waiting requests,
    chunking the last at what is left of `chunked_prefill_size` (= max_num_batched_tokens)
    (schedule_policy.PrefillAdder); with `new_token_ratio`, admission keeps room for the tokens not yet
    generated. When no prefill can be formed, every running sequence decodes."""

    name = "prefill_first"

    def plan(self, state: "ReplicaState") -> Batch:
        preempted_before = state.preemptions
        if self.ntr is not None and not state.running:
            self._restart_ratio(state, self.ntr.init)  # an idle server starts from init again
        budget = self.token_budget
        lanes: list[int] = []
        tokens: list[int] = []
        budget = self._continue_prefills(state, lanes, tokens, budget)
        if state.preemptions != preempted_before:
            if self.ntr is not None:
                self._retracted(state)
            keep = [i for i, lane in enumerate(lanes) if state.active[lane]]
            lanes, tokens = [lanes[i] for i in keep], [tokens[i] for i in keep]
            if lanes:  # admit nobody new in an iteration that had to preempt (as `chunked`)
                return Batch(lanes, tokens, _NO_LANES)
        elif state.waiting and budget > 0:
            self._admit_waiting(state, lanes, tokens, budget)
        if lanes:
            return Batch(lanes, tokens, _NO_LANES)
        decodes = self._grow_decodes(state)
        if state.preemptions != preempted_before and self.ntr is not None:
            self._retracted(state)
        # as `continuous`: a preemption by the growth (after admission was tried) frees a lane and
        # blocks for the waiting head, which the next plan tries: not a batch known to repeat
        return Batch([], [], decodes, stable=state.preemptions == preempted_before)


class Slots(ChunkedPrefill):
    """llama-server's parallel slots (and Ollama's, which runs llama.cpp's server loop).

    Each request may hold at most `context_tokens` tokens — the slot context the engine resolves
    (`EngineConfig.context_limits`: `-c N --parallel n` gives each slot N // n, llama.cpp
    tools/server/server-context.cpp `n_ctx_slot`; with `--kv-unified` one request may use the
    whole buffer). A request whose prompt has at least that many tokens is refused with
    `exceed_context_size_error` ("the request exceeds the available context size",
    `if (slot.task->n_tokens() >= slot.n_ctx)`); with context shift off (the default) generation
    stops with `truncated: true` once `n_tokens + 1 >= n_ctx`. Each iteration (`update_slots`)
    adds one token per generating slot, then prompt tokens of the slots still reading their prompt
    up to `n_batch` (= `max_num_batched_tokens`): the `chunked` policy.

    KV: a split buffer gives every slot its fixed share (reserved whole); a unified buffer is
    shared, so a request reserves what it may use, prompt + max_tokens capped at the slot context.
    """

    name = "slots"
    per_slot_context = True

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.shared = bool(kw.get("shared_slots", False))
        self.slot_tokens = self.context_tokens
        if self.slot_tokens < 2:
            raise ConfigError(
                f"each of the {self.max_seqs} slots gets {self.slot_tokens} tokens of context; raise context_size",
                field="context_size",
            )

    def admission_error(self, prompt_tokens: int, max_tokens: int, state: "ReplicaState") -> str | None:
        if prompt_tokens >= self.slot_tokens:
            return (f"prompt of {prompt_tokens} tokens does not fit the slot context of {self.slot_tokens} tokens "
                    "(llama-server: exceed_context_size_error)")
        need = self.reservation_budget(prompt_tokens, max_tokens)
        if not state.kv.fits_ever(need):
            return f"{need} tokens of slot context do not fit the KV cache ({state.kv.capacity_tokens} tokens)"
        return None

    def reservation_budget(self, prompt_tokens: int, max_tokens: int) -> int:
        if self.shared:
            return min(prompt_tokens + max_tokens, self.slot_tokens)
        return self.slot_tokens  # a split buffer: the slot's share belongs to it whatever the request asks

    def context_limit(self) -> int | None:
        # Generation stops when n_tokens + 1 >= n_ctx_slot, i.e. at n_ctx_slot - 1 tokens in KV.
        return self.slot_tokens - 1


# the built-in policies in the catalog's order (`--help`'s); policies defined later follow in theirs
for _name in [n for n in POLICIES if n in SCHEDULERS]:
    SCHEDULERS[_name] = SCHEDULERS.pop(_name)


def make_scheduler(name: str, *, max_num_seqs: int, max_num_batched_tokens: int | None, context_tokens: int,
                   shared_slots: bool = False, new_token_ratio=None, watermark: float = 0.0,
                   batch_wait: tuple[int, float] = (0, 0.0)) -> Scheduler:
    """A scheduler by registry name. `context_tokens`: the most tokens one request may hold
    (`EngineConfig.context_limits`); `shared_slots`: slots share one KV buffer (`unified`);
    `new_token_ratio`: SGLang's reservation for tokens not yet generated (`EngineConfig.new_token_ratio`);
    `watermark`: vLLM V0's share of blocks a prompt's admission must leave free (`admission_watermark`);
    `batch_wait`: TensorRT-LLM's (batch_wait_timeout_iters, batch_wait_max_tokens_ratio) (`_holds_prompts`)."""
    try:
        cls = SCHEDULERS[name]
    except KeyError:
        raise ConfigError(f"unknown scheduler '{name}'; known: {', '.join(SCHEDULERS)}", field="--scheduler") from None
    return cls(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens, context_tokens=context_tokens,
               shared_slots=shared_slots, new_token_ratio=new_token_ratio, watermark=watermark, batch_wait=batch_wait)


def _import_policy_modules() -> None:
    """Import every module of sim/engine/policies/: a scheduler in a file of its own registers itself."""
    import importlib
    import pkgutil

    from sim.engine import policies

    for mod in pkgutil.iter_modules(policies.__path__):
        importlib.import_module(f"{policies.__name__}.{mod.name}")


_import_policy_modules()
