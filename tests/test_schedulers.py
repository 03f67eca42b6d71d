"""Scheduling policies, driven directly: what `plan()` admits, batches and preempts."""

import numpy as np
import pytest

from sim.engine.kv import ContiguousAllocator, PagedAllocator
from sim.engine.metrics import RequestLog
from sim.engine.schedulers import SCHEDULERS, make_scheduler
from sim.engine.state import Pending, ReplicaState
from sim.errors import ConfigError
from workloads.request import Request


def _state(kv, *requests):
    log = RequestLog()
    st = ReplicaState(kv, log, lanes=4)
    for r in requests:
        st.waiting.append(Pending(log.add(r.id, r.arrival_s, r.prompt_tokens), r))
    return st


def _req(i, prompt, output=10, max_tokens=None):
    return Request(str(i), 0.0, prompt, output, max_tokens or output)


def _finish_prefills(st, batch):
    """Apply a batch's prefill chunks the way the replica does (tokens only)."""
    for lane, chunk in zip(batch.prefill_lanes, batch.prefill_tokens):
        st.ctx[lane] += chunk
        st.used_tokens += chunk
        if st.ctx[lane] >= st.prefill_goal[lane]:
            st.start_decoding(lane)


def _sched(name, seqs=8, budget=None, context=100_000, **kw):
    return make_scheduler(name, max_num_seqs=seqs, max_num_batched_tokens=budget, context_tokens=context, **kw)


def test_chunked_puts_decodes_first_and_fills_the_budget_with_a_prefill_chunk():
    st = _state(PagedAllocator(100_000, 16), _req(0, 100), _req(1, 100), _req(2, 1000))
    s = _sched("chunked", budget=512)
    first = s.plan(st)
    assert first.prefill_tokens == [100, 100, 312]  # the third prompt is chunked to fit 512
    _finish_prefills(st, first)
    second = s.plan(st)
    assert len(second.decode_lanes) == 2  # the two short requests decode: 2 tokens of budget
    assert second.prefill_tokens == [510]  # the rest of the budget goes to the long prompt
    assert not second.stable  # a prefill in the batch: no fast-forward


def test_continuous_runs_prefill_iterations_apart_from_decodes():
    st = _state(PagedAllocator(100_000, 16), _req(0, 100))
    s = _sched("continuous")
    b = s.plan(st)
    assert b.prefill_tokens == [100] and len(b.decode_lanes) == 0
    _finish_prefills(st, b)
    st.waiting.append(Pending(st.log.add("1", 0.0, 50), _req(1, 50)))
    b = s.plan(st)  # a new request fits: its prefill runs alone, the decode waits
    assert b.prefill_tokens == [50] and len(b.decode_lanes) == 0
    _finish_prefills(st, b)
    b = s.plan(st)
    assert len(b.decode_lanes) == 2 and b.stable


def test_static_batching_admits_nobody_while_its_batch_runs():
    st = _state(ContiguousAllocator(100_000), _req(0, 10), _req(1, 10))
    s = _sched("static", seqs=1)
    b = s.plan(st)
    assert len(b.prefill_lanes) == 1
    _finish_prefills(st, b)
    b = s.plan(st)
    assert len(b.decode_lanes) == 1 and not b.prefill_lanes
    assert len(st.waiting) == 1
    assert not s.arrival_may_change_plan(st)


def test_sequential_serves_one_request_at_a_time_whatever_max_num_seqs_says():
    st = _state(ContiguousAllocator(100_000), _req(0, 10), _req(1, 10), _req(2, 10))
    s = _sched("sequential", seqs=8)
    b = s.plan(st)
    assert len(b.prefill_lanes) == 1 and st.n_running == 1


def test_paged_cache_preempts_the_newest_request_and_requeues_it_for_recompute():
    bs = 16
    kv = PagedAllocator(capacity_tokens=4 * bs, block_size=bs)
    st = _state(kv, _req(0, 32, output=100), _req(1, 32, output=100))
    s = _sched("chunked", budget=1000)
    b = s.plan(st)
    assert b.prefill_tokens == [32, 32] and kv.free_blocks == 0
    _finish_prefills(st, b)
    oldest, newest = st.running
    b = s.plan(st)  # both need a third block for their next token: only one can have it
    assert st.preemptions == 1
    assert b.decode_lanes.tolist() == [oldest]
    p = st.waiting[0]
    assert p.request.id == "1"  # the newest went back to the front of the queue
    assert p.generated == 1  # its first token was streamed before the preemption
    assert p.prefill_goal == 32 + 1  # recompute: prompt + generated tokens
    assert st.log.preemptions[p.row] == 1
    kv.check()


def test_admission_reserves_prompt_plus_max_tokens_never_the_true_output_length():
    # Two requests identical but for their true output length get identical reservations:
    # the scheduler cannot see output_tokens (oracle boundary).
    reserved = []
    for output in (5, 400):
        kv = ContiguousAllocator(100_000)
        st = _state(kv, _req(0, 100, output=output, max_tokens=500))
        _sched("continuous").plan(st)
        reserved.append(kv.reserved_tokens)
    assert reserved == [600, 600]


def test_slots_reject_a_prompt_of_at_least_the_slot_context_and_reserve_the_slot_share():
    s = _sched("slots", seqs=4, budget=2048, context=1024)  # split buffer: 1024-token slots
    kv = ContiguousAllocator(4096)
    st = _state(kv)
    assert "exceed_context_size_error" in s.admission_error(1024, 10, st)
    assert s.admission_error(1023, 10, st) is None  # llama-server: n_tokens >= n_ctx is refused
    st.waiting.append(Pending(st.log.add("0", 0.0, 100), _req(0, 100, max_tokens=10)))
    s.plan(st)
    assert kv.reserved_tokens == 1024  # the slot's whole share, whatever the request asks
    assert s.context_limit() == 1023  # generation stops when n_tokens + 1 >= n_ctx


def test_unified_slots_reserve_what_the_request_may_use():
    s = _sched("slots", seqs=4, budget=2048, context=4096, shared_slots=True)
    kv = ContiguousAllocator(4096)
    st = _state(kv, _req(0, 100, max_tokens=50))
    s.plan(st)
    assert kv.reserved_tokens == 150


def test_non_chunking_schedulers_reject_prompts_beyond_the_iteration_budget():
    st = _state(PagedAllocator(100_000, 16))
    assert "does not chunk" in _sched("continuous", budget=512).admission_error(600, 10, st)
    assert _sched("chunked", budget=512).admission_error(600, 10, st) is None


def test_requests_beyond_the_context_or_the_cache_are_refused_with_a_reason():
    st = _state(PagedAllocator(1000, 16))
    s = _sched("chunked", budget=512, context=2048)
    assert "context limit" in s.admission_error(2000, 100, st)
    assert "KV cache" in s.admission_error(900, 200, st)


def test_every_registered_scheduler_is_built_by_name_and_unknown_names_fail_clearly():
    for name, cls in SCHEDULERS.items():
        assert cls.name == name and type(_sched(name, context=4096)) is cls
    with pytest.raises(ConfigError, match="unknown scheduler 'fifo'"):
        _sched("fifo")
    with pytest.raises(ConfigError):
        _sched("chunked", seqs=0)


def test_budget_smaller_than_the_decodes_serves_the_oldest_and_disables_fast_forward():
    st = _state(PagedAllocator(100_000, 16), *[_req(i, 10) for i in range(3)])
    s = _sched("chunked", budget=100)
    _finish_prefills(st, s.plan(st))
    s.token_budget = 2
    b = s.plan(st)
    assert len(b.decode_lanes) == 2 and not b.stable
    assert set(b.decode_lanes.tolist()) == set(np.argsort(st.admit_seq[: 3])[:2].tolist())
