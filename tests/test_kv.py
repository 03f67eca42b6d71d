"""KV allocators: block accounting, on-demand growth, reservations, conservation."""

import numpy as np
import pytest

from sim.engine.kv import ContiguousAllocator, PagedAllocator, make_allocator
from sim.errors import ConfigError


def test_capacity_is_whole_blocks_of_the_token_budget():
    kv = PagedAllocator(capacity_tokens=1000, block_size=16)
    assert kv.total_blocks == 62  # floor(1000 / 16)
    assert kv.capacity_tokens == 62 * 16
    assert kv.free_blocks == kv.total_blocks


def test_paged_allocator_grows_block_by_block_and_frees_every_block_on_release():
    kv = PagedAllocator(capacity_tokens=160, block_size=16, lanes=4)
    assert kv.reserve(0, 17)  # 17 tokens -> 2 blocks
    assert kv.held[0] == 2 and kv.free_blocks == 8
    lanes = np.array([0])
    assert kv.grow(lanes, np.array([32]))  # still 2 blocks
    assert kv.held[0] == 2
    assert kv.grow(lanes, np.array([33]))  # a third block
    assert kv.held[0] == 3 and kv.free_blocks == 7
    kv.check()
    assert kv.release(0) == 3
    assert kv.free_blocks == kv.total_blocks
    kv.check()


def test_reservation_that_does_not_fit_changes_nothing():
    kv = PagedAllocator(capacity_tokens=64, block_size=16, lanes=2)
    assert kv.reserve(0, 48)
    assert not kv.reserve(1, 32)  # needs 2 blocks, 1 free
    assert kv.held[1] == 0 and kv.free_blocks == 1
    assert not kv.grow(np.array([0, 1]), np.array([64, 16]))  # needs 2, 1 free: all or nothing
    assert kv.held.tolist() == [3, 0]
    kv.check()


def test_contiguous_reserves_the_whole_budget_up_front_in_tokens():
    kv = ContiguousAllocator(capacity_tokens=1000, block_size=16)
    assert kv.block_size == 1  # exact-size regions: block size is ignored
    # admission reserves prompt + max_tokens, whatever the first chunk is
    assert kv.admission_tokens(prompt_tokens=100, budget_tokens=600, chunk_tokens=100) == 600
    assert kv.reserve(0, 600)
    assert kv.reserved_tokens == 600
    assert not kv.reserve(1, 401)
    kv.check()


def test_paged_admission_reserves_only_the_first_chunk():
    kv = PagedAllocator(capacity_tokens=1000, block_size=16)
    assert kv.admission_tokens(prompt_tokens=100, budget_tokens=600, chunk_tokens=64) == 64


@pytest.mark.parametrize("free_tokens", [0, 5, 16, 40, 200])
def test_paged_decode_steps_available_matches_step_by_step_growth(free_tokens):
    bs = 16
    ctx = np.array([15, 16, 17, 31, 100])
    lanes = np.arange(len(ctx))
    base = int(sum(-(-(c + 1) // bs) for c in ctx))
    kv = PagedAllocator(capacity_tokens=(base * bs + free_tokens), block_size=bs, lanes=len(ctx))
    assert kv.grow(lanes, ctx + 1)
    k = kv.decode_steps_available(lanes, ctx, max_steps=500)
    # brute force: the largest k whose growth fits
    probe = PagedAllocator(capacity_tokens=kv.capacity_tokens, block_size=bs, lanes=len(ctx))
    probe.grow(lanes, ctx + 1)
    steps = 0
    while steps < 500 and probe.grow(lanes, ctx + steps + 1):
        steps += 1
    assert k == steps
    assert kv.grow(lanes, ctx + k)
    kv.check()


def test_conservation_check_detects_a_leak():
    kv = PagedAllocator(capacity_tokens=64, block_size=16)
    kv.reserve(0, 16)
    kv.free_blocks += 1  # a leak
    with pytest.raises(AssertionError, match="conservation"):
        kv.check()


def test_unknown_allocator_is_a_config_error_naming_the_known_ones():
    with pytest.raises(ConfigError, match="contiguous, paged"):
        make_allocator("buddy", 100, 16)


@pytest.mark.parametrize("keep", [0, 1, 3, 6])
def test_paged_decode_steps_available_leaves_keep_free_blocks_untouched(keep):
    # The replica keeps as many blocks free as there are unreferenced cached ones (a growth past
    # that evicts one): the answer must equal that of a cache with `keep` fewer free blocks.
    bs = 16
    ctx = np.array([15, 16, 17, 31, 100])
    lanes = np.arange(len(ctx))
    base = int(sum(-(-(c + 1) // bs) for c in ctx))
    kv = PagedAllocator(capacity_tokens=(base + 6) * bs, block_size=bs, lanes=len(ctx))
    small = PagedAllocator(capacity_tokens=(base + 6 - keep) * bs, block_size=bs, lanes=len(ctx))
    assert kv.grow(lanes, ctx + 1) and small.grow(lanes, ctx + 1)
    k = kv.decode_steps_available(lanes, ctx, max_steps=500, keep_free_blocks=keep)
    assert k == small.decode_steps_available(lanes, ctx, max_steps=500)
    assert kv.grow_blocks_needed(lanes, ctx + k) <= kv.free_blocks - keep
    assert k == 500 or kv.grow_blocks_needed(lanes, ctx + k + 1) > kv.free_blocks - keep


def test_block_phases_count_what_the_allocator_counts_from_its_arrays():
    """`BlockPhases` (the decoding lanes' block arithmetic by bucket) against `PagedAllocator`'s
    array arithmetic: the boundary lanes, the steps the free blocks allow and a run's blocks."""
    from sim.engine.kv import BlockPhases

    rng = np.random.default_rng(7)
    for trial in range(60):
        bs = int(rng.choice([1, 4, 16]))
        n = int(rng.integers(1, 9))
        clock = int(rng.integers(0, 50))
        ctx = rng.integers(1, 200, size=n)
        kv = PagedAllocator(capacity_tokens=bs * (int(ctx.sum()) // bs + 4 * n + int(rng.integers(0, 40))),
                            block_size=bs, lanes=n)
        phases = BlockPhases(bs)
        lanes = np.arange(n)
        for lane, c in enumerate(ctx.tolist()):
            assert kv.reserve(lane, c)  # exactly the blocks its context needs
            phases.join(lane, c, clock)
        phases.check(lanes.tolist(), ctx.tolist(), kv, clock)
        # the lanes needing a block for their next token: those whose context fills its last block
        assert sorted(phases.boundary(clock)) == [lane for lane in range(n) if ctx[lane] % bs == 0]
        assert kv.grow_by(lanes, ctx, 1)  # the scheduler grows every lane for one step ...
        for keep in (0, 2):
            for max_steps in (1, 7, 40, 300):
                want = kv.decode_steps_available(lanes, ctx, max_steps, keep)
                assert phases.steps_available(n, kv.free_blocks - keep, clock, max_steps) == want
        for k in (1, 2, bs, bs + 3, 3 * bs + 1):  # ... then a run of k steps takes these blocks
            assert phases.blocks_for_steps(n, k, clock) == kv.grow_blocks_needed(lanes, ctx + k)
    phases.leave(0)
    assert 0 not in phases.bucket_of and all(0 not in b for b in phases.buckets)
