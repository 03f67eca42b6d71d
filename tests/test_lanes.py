"""The decoding lanes' one representation (`sim.engine.state.ReplicaState`: a lane's context is its
base plus the shared decode clock) through the events that move only some lanes or take the
lanes' blocks out of the block phases. The built-in policies rarely reach them (a budget that cuts
the decodes needs more decoding sequences than batched tokens), so the tests provoke them through
the public scheduler and allocator hooks, and let the replica's invariant checks (stop clocks,
context sum, block phases and KV conservation at every event) and the fast-forward /
step-by-step agreement judge the result."""

from __future__ import annotations

import numpy as np
import pytest

from sim.engine.kv import PagedAllocator
from sim.engine.schedulers import SCHEDULERS, Batch
from sim.engine.state import ReplicaState
from sim_helpers import engine_with_kv_capacity, random_trace, run


def _count(monkeypatch, name: str, calls: list) -> None:
    """Record every call of ReplicaState.`name` that does something (for `phases_off`: with the
    phases still on)."""
    f = getattr(ReplicaState, name)

    def wrapped(self, *a, **kw):
        if name != "phases_off" or self.phases_ok:
            calls.append(name)
        return f(self, *a, **kw)

    monkeypatch.setattr(ReplicaState, name, wrapped)


def _agree(reqs, eng):
    """Fast-forward and step-by-step runs under the replica's invariant checks; the two agree."""
    ff = run(reqs, eng)  # check_invariants: stop clocks, context sum, phases, KV conservation
    step = run(reqs, eng, fast_forward=False)
    cols = ["arrival_s", "scheduled_s", "first_token_s", "finish_s", "output_tokens"]
    np.testing.assert_allclose(ff.requests[cols].to_numpy(float), step.requests[cols].to_numpy(float),
                               rtol=1e-9, atol=1e-12)
    assert ff.requests["status"].tolist() == step.requests["status"].tolist()
    for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        for stat, v in ff.summary[key].items():
            w = step.summary[key][stat]
            assert (v is None and w is None) or abs(v - w) <= 1e-9 * max(abs(w), 1e-9), (key, stat, v, w)
    return ff


@pytest.mark.parametrize("kv", ["paged", "contiguous"])
def test_steps_that_only_some_lanes_take_keep_every_lane_right(monkeypatch, kv):
    # An iteration serves at most the 6 oldest decodes (as a token budget smaller than the decodes
    # does, `ChunkedPrefill.plan`): the other lanes skip a step they were grown for.
    chunked = SCHEDULERS["chunked"]
    plan = chunked.plan

    def cut(self, state):
        b = plan(self, state)
        if len(b.decode_lanes) > 6:
            older = b.decode_lanes[np.argsort(state.admit_seq[b.decode_lanes], kind="stable")[:6]]
            return Batch(b.prefill_lanes, b.prefill_tokens, np.sort(older), stable=False)
        return b

    monkeypatch.setattr(chunked, "plan", cut)
    calls: list = []
    for name in ("step_some", "phases_off"):
        _count(monkeypatch, name, calls)
    reqs = random_trace(60, 3, rate_per_s=50.0, prompt=(1, 200), output=(5, 120))
    eng = engine_with_kv_capacity("vllm", 6000, scheduler="chunked", kv_allocator=kv, max_num_seqs=32,
                                  max_num_batched_tokens=512, block_size=16)
    res = _agree(reqs, eng)
    assert "step_some" in calls  # the partial steps ran ...
    assert ("phases_off" in calls) == (kv == "paged")  # ... and took the paged blocks out of the phases
    done = res.requests[res.requests["status"] == "completed"]
    by_id = {r.id: r for r in reqs}
    assert len(done) == len(reqs)
    # every request got exactly the tokens it asked for, skipped steps or not
    assert [int(o) for o in done["output_tokens"]] == [min(by_id[i].output_tokens, by_id[i].max_tokens)
                                                       for i in done["id"]]


def test_a_lane_joining_with_more_blocks_than_its_context_needs_turns_the_phases_off(monkeypatch):
    # Admission reserves one block more than the first chunk needs: the lane joins the decoding
    # lanes holding a block its context does not fill, so the bucket arithmetic cannot count it.
    reserve = PagedAllocator.admission_tokens
    monkeypatch.setattr(PagedAllocator, "admission_tokens",
                        lambda self, p, budget, chunk: reserve(self, p, budget, chunk) + self.block_size)
    calls: list = []
    _count(monkeypatch, "phases_off", calls)
    reqs = random_trace(40, 5, rate_per_s=30.0, prompt=(1, 300), output=(5, 150))
    eng = engine_with_kv_capacity("vllm", 8000, scheduler="chunked", kv_allocator="paged", max_num_seqs=16,
                                  max_num_batched_tokens=512, block_size=16)
    res = _agree(reqs, eng)
    assert calls == ["phases_off"] * 2  # once in each run, for the rest of it
    assert (res.requests["status"] == "completed").all()
