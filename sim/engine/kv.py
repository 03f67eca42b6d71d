"""KV-cache allocators: who holds which share of the KV memory. They know blocks, not time.

The replica gives every running sequence a *lane* (a small integer, stable while the sequence
runs); an allocator keeps the number of blocks each lane holds in a numpy array, so the growth of a
whole decode batch is a few vectorised operations, never a Python loop over sequences.

- `ContiguousAllocator` reserves a sequence's whole budget at admission — prompt + max_tokens (the
  client's budget, never the true output length: a server cannot know it), or a fixed slot — in
  one-token units. The gap between reserved and used tokens is the waste that paging removes
  (Kwon et al., "Efficient Memory Management for LLM Serving with PagedAttention", SOSP 2023, §3).
- `PagedAllocator` hands out fixed blocks of `block_size` tokens (vLLM default 16) on demand, as a
  sequence's KV grows; when a block is missing the scheduler preempts (recompute) — see
  `sim.engine.schedulers`.

Invariant (checked by `check()` and the property tests): allocated blocks + free blocks = total
blocks, after every operation.

Prefix caching (`sim.engine.prefix_cache.BlockPrefixCache`, paged only): a lane's `held` count includes
the cached blocks it references; a cached block referenced by several lanes is one block of
memory. `free_blocks` counts the truly free blocks *and* the cached blocks nobody references (they
are evicted, least recently used first, when an allocation needs them), so the policy code above
is unchanged. Conservation becomes: private blocks (held minus referenced cached, over lanes) +
referenced cached blocks + free blocks (unreferenced cached included) = total.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from sim.catalog.policies import declare_allocator
from sim.cost.decode_runs import largest_within
from sim.errors import ConfigError

# ndarray.sum() of a 1-D array, minus the Python wrapper numpy puts around it (this runs once or
# twice per simulated event)
_sum = np.add.reduce

#: Every KV allocator by name (filled by `KVAllocator.__init_subclass__`).
ALLOCATORS: dict[str, type["KVAllocator"]] = {}


class KVAllocator:
    """Block accounting shared by both allocators.

    `capacity_tokens` KV slots split into `total_blocks = capacity_tokens // block_size` blocks;
    `held[lane]` blocks belong to the sequence in that lane.
    """

    name: ClassVar[str] = ""
    #: whether a decoding sequence can need new blocks (paged) or holds its whole budget (contiguous)
    grows_on_decode: ClassVar[bool] = True
    #: whether KV is handed out in blocks of `block_size` tokens (paged: block_size matters, and prefix
    #: caching shares whole blocks) rather than sized exactly, in one-token units (contiguous)
    block_granular: ClassVar[bool] = True

    @classmethod
    def __init_subclass__(cls, **kw) -> None:
        # a subclass with a name joins ALLOCATORS and the names presets and --kv accept (sim.catalog.policies)
        super().__init_subclass__(**kw)
        if cls.__dict__.get("name"):
            declare_allocator(cls.name)
            ALLOCATORS[cls.name] = cls

    def __init__(self, capacity_tokens: int, block_size: int, lanes: int = 64) -> None:
        if capacity_tokens < 0:
            raise ConfigError(f"KV capacity must be >= 0 tokens, got {capacity_tokens}", field="kv")
        if block_size < 1:
            raise ConfigError(f"block size must be >= 1 token, got {block_size}", field="--block-size")
        self.block_size = int(block_size)
        self.total_blocks = int(capacity_tokens) // self.block_size
        self.free_blocks = self.total_blocks
        self.held = np.zeros(max(1, lanes), dtype=np.int64)
        self.prefix = None  # sim.engine.prefix_cache.BlockPrefixCache when prefix caching is on (paged)

    # ---- sizes ---------------------------------------------------------------------------------
    @property
    def capacity_tokens(self) -> int:
        """Tokens the cache can hold: whole blocks only."""
        return self.total_blocks * self.block_size

    @property
    def allocated_blocks(self) -> int:
        return self.total_blocks - self.free_blocks

    @property
    def reserved_tokens(self) -> int:
        """Tokens' worth of memory handed out (used or not)."""
        return self.allocated_blocks * self.block_size

    def blocks_for(self, tokens: int) -> int:
        """Blocks covering `tokens` tokens: ceil(tokens / block_size)."""
        return -(-int(tokens) // self.block_size)

    def fits_ever(self, tokens: int) -> bool:
        """Whether a sequence of `tokens` tokens could fit in an otherwise empty cache."""
        return self.blocks_for(tokens) <= self.total_blocks

    # ---- lanes -----------------------------------------------------------------------------------
    def ensure_lanes(self, n: int) -> None:
        if n > len(self.held):
            grown = np.zeros(max(n, 2 * len(self.held)), dtype=np.int64)
            grown[: len(self.held)] = self.held
            self.held = grown

    def reserve(self, lane: int, tokens: int) -> bool:
        """Make `lane` hold blocks for at least `tokens` tokens. False (and nothing changes) when
        the free blocks do not suffice."""
        need = self.blocks_for(tokens) - int(self.held[lane])
        if need <= 0:
            return True
        if need > self.free_blocks:
            return False
        self.held[lane] += need
        self.free_blocks -= need
        if self.prefix is not None:
            self._evict()
        return True

    def release(self, lane: int) -> int:
        """Free every block of `lane` (cached blocks it referenced stay cached); returns how many
        it held."""
        n = int(self.held[lane])
        self.held[lane] = 0
        if self.prefix is None:
            self.free_blocks += n
            return n
        shared, unreferenced = self.prefix.release(lane)
        self.free_blocks += n - shared + unreferenced
        return n

    # ---- prefix caching ----------------------------------------------------------------------------
    def _evict(self) -> None:
        """Keep unreferenced cached blocks <= free blocks: an allocation that took more blocks than
        were truly free reused the least recently used cached ones."""
        over = len(self.prefix.unreferenced) - self.free_blocks
        if over > 0:
            self.prefix.evict(over)

    def acquire_prefix(self, lane: int, keys) -> None:
        """`lane` (holding nothing yet) starts with the cached blocks `keys` (a prefix-cache hit)."""
        self.free_blocks -= self.prefix.acquire(lane, keys)
        self.held[lane] += len(keys)

    def insert_prefix(self, lane: int, keys) -> None:
        """The lane's first len(keys) blocks, now computed, become cached (no memory changes hands)."""
        self.prefix.insert(lane, keys)

    def check(self) -> None:
        """KV conservation: private blocks held by lanes + referenced cached blocks + free blocks =
        total blocks; with a prefix cache also its reference counts (see the module docstring)."""
        held = int(self.held.sum())
        if self.prefix is not None:
            shared = sum(len(k) for k in self.prefix.lane_keys.values())
            held += self.prefix.check() - shared
            if len(self.prefix.unreferenced) > self.free_blocks:
                raise AssertionError("more unreferenced cached blocks than free blocks")
        if held + self.free_blocks != self.total_blocks or self.free_blocks < 0:
            raise AssertionError(
                f"KV conservation broken: held {held} + free {self.free_blocks} != total {self.total_blocks}"
            )

    # ---- policy hooks (what differs between allocators) -------------------------------------------
    def admission_tokens(self, prompt_tokens: int, budget_tokens: int, chunk_tokens: int) -> int:
        """Tokens to reserve when a sequence is admitted. `budget_tokens` is the most it may ever
        hold (prompt + max_tokens, or its slot), `chunk_tokens` what its first iteration computes."""
        raise NotImplementedError

    def grow_blocks_needed(self, lanes: np.ndarray, tokens_after: np.ndarray) -> int:
        """Extra blocks the lanes need so each holds `tokens_after` tokens."""
        raise NotImplementedError

    def grow(self, lanes: np.ndarray, tokens_after: np.ndarray) -> bool:
        """Allocate what `grow_blocks_needed` says, all or nothing."""
        raise NotImplementedError

    def grow_by(self, lanes: np.ndarray, context: np.ndarray, steps: int) -> bool:
        """`grow(lanes, context + steps)` (k decode steps write k tokens per lane); `context` is
        left unchanged (the replica reuses the gather it passes)."""
        return self.grow(lanes, context + steps)

    def decode_steps_available(self, lanes: np.ndarray, context: np.ndarray, max_steps: int,
                               keep_free_blocks: int = 0) -> int:
        """Largest k <= max_steps such that every lane can hold context + k tokens with the
        blocks it has plus the free ones (k decode steps write k more tokens per lane), leaving at
        least `keep_free_blocks` blocks free (the replica passes the unreferenced cached blocks
        when a growth that evicts one could change an admission: see `Replica._run_length`)."""
        raise NotImplementedError


class ContiguousAllocator(KVAllocator):
    """Whole budget reserved up front, in one-token units; a sequence never grows past it."""

    name = "contiguous"
    grows_on_decode = False
    block_granular = False

    def __init__(self, capacity_tokens: int, block_size: int = 1, lanes: int = 64) -> None:
        # One-token granularity: a contiguous region is sized exactly (block_size is ignored).
        super().__init__(capacity_tokens, 1, lanes)

    def admission_tokens(self, prompt_tokens: int, budget_tokens: int, chunk_tokens: int) -> int:
        return budget_tokens

    def grow_blocks_needed(self, lanes: np.ndarray, tokens_after: np.ndarray) -> int:
        over = tokens_after - self.held[lanes]
        return int(over[over > 0].sum()) if len(over) else 0

    def grow(self, lanes: np.ndarray, tokens_after: np.ndarray) -> bool:
        # A reservation covers the whole budget and the replica stops every sequence at its budget
        # (`ReplicaState.admit` caps stop_ctx), so growth never needs a block.
        return True

    def grow_by(self, lanes: np.ndarray, context: np.ndarray, steps: int) -> bool:
        return True

    def decode_steps_available(self, lanes: np.ndarray, context: np.ndarray, max_steps: int,
                               keep_free_blocks: int = 0) -> int:
        # A reservation already covers every token a sequence may write: growth takes no free block.
        room = int((self.held[lanes] - context).min()) if len(lanes) else max_steps
        return max(0, min(max_steps, room))


class PagedAllocator(KVAllocator):
    """Fixed-size blocks on demand (vLLM PagedAttention; `block_size` default 16 tokens)."""

    name = "paged"

    def admission_tokens(self, prompt_tokens: int, budget_tokens: int, chunk_tokens: int) -> int:
        return chunk_tokens

    def _need(self, lanes: np.ndarray, tokens_after: np.ndarray) -> np.ndarray:
        """Blocks each lane lacks to hold `tokens_after` tokens: max(0, ceil(t / bs) - held)."""
        need = (tokens_after + (self.block_size - 1)) // self.block_size
        need -= self.held[lanes]
        return np.maximum(need, 0, out=need)

    def grow_blocks_needed(self, lanes: np.ndarray, tokens_after: np.ndarray) -> int:
        return int(self._need(lanes, tokens_after).sum()) if len(lanes) else 0

    def grow(self, lanes: np.ndarray, tokens_after: np.ndarray) -> bool:
        return self.grow_by(lanes, tokens_after, 0)

    def grow_by(self, lanes: np.ndarray, context: np.ndarray, steps: int) -> bool:
        # The allocator call of every decode iteration, so written for few numpy calls (each costs
        # about a microsecond on a batch of a hundred lanes): blocks after = ceil((c + k) / bs),
        # computed in one fresh array (`context` is left as it was).
        if not len(lanes):
            return True
        bs = self.block_size
        need = context + (steps + bs - 1)
        need //= bs
        held = self.held[lanes]
        need -= held
        np.maximum(need, 0, out=need)
        total = int(_sum(need))
        if total > self.free_blocks:
            return False
        if total:
            need += held
            self.held[lanes] = need
            self.free_blocks -= total
            if self.prefix is not None and self.prefix.unreferenced:
                self._evict()
        return True

    def take_blocks(self, n: int) -> None:
        """`n` free blocks go to decoding lanes whose counts the replica state keeps (with its block
        phases: `ReplicaState.phases_ok`); `held` is written when the state reads them (`hold_for`)."""
        self.free_blocks -= n
        if self.prefix is not None and self.prefix.unreferenced:
            self._evict()

    def holds_exactly(self, lane: int, tokens: int) -> bool:
        """Whether `lane` holds exactly the blocks `tokens` tokens need (ceil(tokens / block_size))."""
        return int(self.held[lane]) == -(-tokens // self.block_size)

    def hold_for(self, lanes, tokens) -> None:
        """Write `held` of `lanes` (a lane or an array) as the blocks `tokens` need, blocks already
        counted out of `free_blocks` (`take_blocks`): the replica state writing its decoding lanes'
        blocks (`ReplicaState.write_blocks`)."""
        self.held[lanes] = (tokens + (self.block_size - 1)) // self.block_size

    def decode_steps_available(self, lanes: np.ndarray, context: np.ndarray, max_steps: int,
                               keep_free_blocks: int = 0) -> int:
        if not len(lanes) or max_steps <= 0:
            return max(0, max_steps)
        bs = self.block_size
        free = self.free_blocks - keep_free_blocks
        # Cheap sufficient test: k steps add at most ceil(k / bs) + 1 blocks per lane.
        if len(lanes) * (-(-max_steps // bs) + 1) <= free:
            return max_steps
        held = self.held[lanes]

        def extra(k: int) -> int:
            return int(np.maximum((context + k + (bs - 1)) // bs - held, 0).sum())

        return largest_within(extra, free, max_steps)  # extra(k) grows with k


class BlockPhases:
    """The paged cache's block arithmetic for decoding lanes that step together (the replica state's
    `decode_clock` counts their common steps): a lane holding exactly the blocks its context needs
    sits in bucket (context - clock) mod block_size, which stays its bucket while it steps with the
    clock, so the lanes that need a block at the next step (`boundary`), the steps the free blocks
    allow (`steps_available`) and the blocks a run of steps takes (`blocks_for_steps`) are counted
    per bucket instead of per lane. `PagedAllocator.decode_steps_available` / `grow_blocks_needed`
    give the same numbers from the arrays (compared under the replica's `check_invariants`)."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.buckets: list[list[int]] = [[] for _ in range(block_size)]
        self.bucket_of: dict[int, int] = {}

    def join(self, lane: int, context: int, clock: int) -> None:
        key = (context - clock) % self.block_size
        self.buckets[key].append(lane)
        self.bucket_of[lane] = key

    def leave(self, lane: int) -> None:
        key = self.bucket_of.pop(lane, None)
        if key is not None:
            self.buckets[key].remove(lane)

    def boundary(self, clock: int) -> list[int]:
        """The lanes whose context fills their last block (they need one more for their next
        token; `grow_by(lanes, ctx, 1)` gives each exactly one, the others none), in joining order."""
        return self.buckets[-clock % self.block_size]

    def steps_available(self, n: int, free: int, clock: int, max_steps: int) -> int:
        """`decode_steps_available` for all n lanes, right after they were grown for one step, with
        `free` blocks to spend: a lane r tokens past a block boundary holds s = block_size - r tokens
        of room and needs its j-th further block at step s + 1 + (j - 1) x block_size. All s lie
        within one block, so those steps come in rounds of one block per lane, and the largest k
        with at most `free` blocks needed is the (free mod n)-th smallest s plus (free // n)
        blocks' worth of steps."""
        if not n or max_steps <= 0:
            return max(0, max_steps)
        bs = self.block_size
        if n * (-(-max_steps // bs) + 1) <= free:  # (grow_by's cheap sufficient test, first)
            return max_steps
        if free < 0:
            return 0
        rounds, j = divmod(free, n)
        buckets = self.buckets
        seen = 0
        for r in range(bs - 1, -1, -1):  # room bs - r, smallest first
            seen += len(buckets[(r - clock) % bs])
            if seen > j:
                return min(max_steps, bs - r + rounds * bs)
        raise AssertionError("block phases out of step with the decoding lanes")  # pragma: no cover

    def blocks_for_steps(self, n: int, k: int, clock: int) -> int:
        """Blocks all n lanes need for k - 1 more steps after they were grown for one (the clock not
        yet moved): a lane r tokens past a block boundary needs (r + k - 1) // block_size, i.e.
        a + [r >= bs - b] with k - 1 = a x bs + b."""
        bs = self.block_size
        a, b = divmod(k - 1, bs)
        total = a * n
        buckets = self.buckets
        for r in range(bs - b, bs):
            total += len(buckets[(r - clock) % bs])
        return total

    def check(self, lanes: list[int], contexts: list[int], kv: "KVAllocator", clock: int) -> None:
        """Every lane in its bucket and holding exactly the blocks its context needs."""
        if sorted(self.bucket_of) != sorted(lanes) or sum(map(len, self.buckets)) != len(lanes):
            raise AssertionError("block phases out of step with the decoding lanes")
        for lane, c in zip(lanes, contexts):
            key = self.bucket_of[lane]
            if not kv.holds_exactly(lane, c) or key != (c - clock) % self.block_size or lane not in self.buckets[key]:
                raise AssertionError(f"lane {lane}: block phase out of step")




def make_allocator(kind: str, capacity_tokens: int, block_size: int, lanes: int = 64) -> KVAllocator:
    """An allocator by registry name (`contiguous` | `paged`)."""
    try:
        cls = ALLOCATORS[kind]
    except KeyError:
        raise ConfigError(f"unknown KV allocator '{kind}'; known: {', '.join(ALLOCATORS)}", field="--kv") from None
    return cls(capacity_tokens, block_size, lanes)
