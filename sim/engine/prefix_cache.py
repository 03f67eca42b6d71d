"""Prefix caching: KV of a prompt prefix computed once and reused by later requests sharing it.

What is shared comes from the trace (workloads/README.md): requests with the same `prefix_id`
have identical first min(their `prefix_tokens`) tokens; `prefix_blocks` are chained hashes of
the prompt's 512-token blocks (Mooncake, FAST'25: equal hash = equal tokens up to the block's end),
so a prompt shares its leading blocks with any request whose leading hashes are equal.

Two caches, after what the engines do:

- `BlockPrefixCache` (paged allocators — vLLM v1 automatic prefix caching, SGLang RadixAttention,
  TGI, TensorRT-LLM block reuse): a full KV block of `block_size` tokens is identified by a key
  that names its content and everything before it (`block_keys`); a block is cached once the
  request that computed it has finished its prefill, stays cached after the request ends
  (reference count 0: it counts as free memory but is still a hit) and is evicted least recently
  used first when a new allocation needs the memory (vLLM `BlockPool`: free-block queue in LRU
  order, `get_new_blocks` evicts a cached block when it takes it). A hit is the longest run of
  leading blocks present, never the whole prompt: at least one token is computed to produce the
  logits (vLLM v1 `get_computed_blocks`: `max_cache_hit_length = num_tokens - 1`).
  Simplification: vLLM caches each block as soon as it is full; here a request's blocks become
  hits for others when its prefill completes (a request that arrives while another is still
  prefilling the same prefix misses it).
- `SlotPromptCache` (contiguous allocators — llama-server / Ollama `cache_prompt`): each idle slot
  keeps the KV of the last prompt it served; a new request that finds an idle slot holding a
  prompt sharing its prefix reuses that common prefix (token-exact) and recomputes the rest
  (llama.cpp tools/server: `get_available_slot` prefers the slot with the most similar prompt,
  then `n_past = common prefix`). The simulator keeps at most `max_num_seqs` such prompts: one
  per slot, the least recently used one overwritten when a request that hits nothing takes a
  slot while all are occupied or hold a cached prompt. The reused KV lives inside the request's
  own contiguous reservation, so it takes no extra memory.

Neither cache counts generated tokens as shared (the trace describes prompt sharing only).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from workloads.request import Request

#: tokens per `prefix_blocks` hash: Mooncake's block size (FAST'25 trace README); the same
#: constant the trace statistics use (`workloads.stats.MOONCAKE_BLOCK_TOKENS`).
TRACE_BLOCK_TOKENS = 512


def shared_tokens(r: Request) -> int:
    """Leading prompt tokens another request may share with `r` (0 when the trace says none)."""
    if r.prefix_blocks is not None:
        return min(r.prompt_tokens, len(r.prefix_blocks) * TRACE_BLOCK_TOKENS)
    if r.prefix_id is not None:
        return min(r.prompt_tokens, r.prefix_tokens or 0)
    return 0


def block_keys(r: Request, block_size: int) -> tuple:
    """Keys of the full `block_size`-token KV blocks of `r`'s shareable prefix, in order.

    Block j (tokens [j x B, (j + 1) x B)) gets ("p", prefix_id, j) — by the trace's rule two
    requests with the same prefix_id agree on every token below both their prefix_tokens — or,
    from `prefix_blocks`, ("h", hash of the 512-token trace block holding its last token, j): the
    chained hash already names every token before it."""
    n = shared_tokens(r) // block_size
    if not n:
        return ()
    if r.prefix_blocks is not None:
        hashes = r.prefix_blocks
        return tuple(("h", hashes[((j + 1) * block_size - 1) // TRACE_BLOCK_TOKENS], j) for j in range(n))
    pid = r.prefix_id
    return tuple(("p", pid, j) for j in range(n))


@dataclass
class PrefixStats:
    """Lookups in tokens (vLLM's prefix-cache hit rate: hit tokens / queried prompt tokens)."""

    queried_tokens: int = 0
    hit_tokens: int = 0
    lookups: int = 0
    hit_lookups: int = 0
    evicted_blocks: int = 0

    def record(self, queried: int, hit: int) -> None:
        self.queried_tokens += queried
        self.hit_tokens += hit
        self.lookups += 1
        if hit:
            self.hit_lookups += 1

    def summary(self, kind: str) -> dict:
        return {
            "enabled": True,
            "kind": kind,
            "hit_rate": self.hit_tokens / self.queried_tokens if self.queried_tokens else 0.0,
            "hit_tokens": self.hit_tokens,
            "queried_tokens": self.queried_tokens,
            "lookups": self.lookups,
            "hit_lookups": self.hit_lookups,
            "evicted_blocks": self.evicted_blocks,
        }


class BlockPrefixCache:
    """Reference-counted cached blocks, unreferenced ones in LRU order. Owned by a `KVAllocator`,
    which keeps the block arithmetic (see `sim.engine.kv`): an unreferenced cached block counts as free
    there (it can be evicted whenever a block is needed), a referenced one as allocated."""

    kind = "blocks"
    #: whether a finished request's prompt is kept for the next one (`put` on completion)
    keeps_finished_prompts = False

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.refcount: dict = {}  # key -> lanes referencing the cached block
        self.unreferenced: OrderedDict = OrderedDict()  # keys with refcount 0, least recently used first
        self.lane_keys: dict[int, list] = {}  # lane -> cached keys it references
        self.stats = PrefixStats()

    @property
    def cached_blocks(self) -> int:
        return len(self.refcount)

    def lookup(self, keys: tuple, prompt_tokens: int) -> int:
        """Leading blocks of `keys` present, at most (prompt_tokens - 1) // block_size of them."""
        limit = min(len(keys), (prompt_tokens - 1) // self.block_size)
        rc = self.refcount
        n = 0
        while n < limit and keys[n] in rc:
            n += 1
        return n

    def acquire(self, lane: int, keys) -> int:
        """`lane` references the cached blocks `keys`; returns how many were unreferenced before
        (they stop counting as free memory)."""
        rc = self.refcount
        revived = 0
        for k in keys:
            c = rc[k]
            if c == 0:
                del self.unreferenced[k]
                revived += 1
            rc[k] = c + 1
        self.lane_keys.setdefault(lane, []).extend(keys)
        return revived

    def insert(self, lane: int, keys) -> int:
        """The lane's own blocks holding `keys` become cached (still referenced by the lane); keys
        already cached by another request stay private duplicates. Returns how many were added."""
        rc = self.refcount
        new = [k for k in keys if k not in rc]
        for k in new:
            rc[k] = 1
        if new:
            self.lane_keys.setdefault(lane, []).extend(new)
        return len(new)

    def release(self, lane: int) -> tuple[int, int]:
        """Drop the lane's references; returns (cached blocks it referenced, blocks now unreferenced)."""
        keys = self.lane_keys.pop(lane, None)
        if not keys:
            return 0, 0
        rc = self.refcount
        unref = self.unreferenced
        freed = 0
        for k in keys:
            c = rc[k] - 1
            rc[k] = c
            if c == 0:
                unref[k] = None
                freed += 1
        return len(keys), freed

    def evict(self, n: int) -> None:
        """Forget the `n` least recently used unreferenced blocks (their memory is being reused)."""
        unref = self.unreferenced
        rc = self.refcount
        for _ in range(n):
            k, _ = unref.popitem(last=False)
            del rc[k]
        self.stats.evicted_blocks += n

    def check(self) -> int:
        """Reference counts consistent with the lanes' keys; returns the referenced cached blocks."""
        counts: dict = {}
        for keys in self.lane_keys.values():
            for k in keys:
                counts[k] = counts.get(k, 0) + 1
        for k, c in self.refcount.items():
            if c != counts.get(k, 0) or c < 0:
                raise AssertionError(f"prefix cache refcount of {k} is {c}, lanes hold {counts.get(k, 0)}")
            if (c == 0) != (k in self.unreferenced):
                raise AssertionError(f"prefix cache block {k} LRU membership disagrees with refcount {c}")
        if set(counts) - set(self.refcount):
            raise AssertionError("a lane references a block that is not cached")
        return len(self.refcount) - len(self.unreferenced)


class SlotPromptCache:
    """The last prompt of each idle llama-server slot (see the module docstring)."""

    kind = "slots"
    keeps_finished_prompts = True  # an idle slot keeps its last prompt (llama-server)

    def __init__(self, slots: int) -> None:
        self.slots = max(1, slots)
        self.prompts: OrderedDict = OrderedDict()  # slot entry id -> (request, shared tokens), LRU first
        self._next = 0
        self.stats = PrefixStats()

    @staticmethod
    def common_tokens(a: Request, b: Request) -> int:
        """Leading tokens two requests share by the trace's rules."""
        if a.prefix_blocks is not None and b.prefix_blocks is not None:
            n = 0
            for x, y in zip(a.prefix_blocks, b.prefix_blocks):
                if x != y:
                    break
                n += 1
            return min(n * TRACE_BLOCK_TOKENS, shared_tokens(a), shared_tokens(b))
        if a.prefix_id is not None and a.prefix_id == b.prefix_id:
            return min(shared_tokens(a), shared_tokens(b))
        return 0

    def _best(self, r: Request):
        """The idle slot whose prompt shares the most with `r`: (entry id or None, tokens)."""
        best, best_n = None, 0
        if shared_tokens(r):
            for sid, prev in self.prompts.items():
                n = self.common_tokens(r, prev)
                if n > best_n:
                    best, best_n = sid, n
        n = min(best_n, r.prompt_tokens - 1)
        return (best if n > 0 else None), n

    def peek(self, r: Request) -> int:
        """Prompt tokens of `r` an idle slot already holds (at most prompt_tokens - 1)."""
        return self._best(r)[1]

    def take(self, r: Request, running: int) -> int:
        """A slot for `r` (admitted with `running` other requests in slots): the idle slot whose
        prompt shares the most with it, its prompt consumed (the slot is busy now); returns the
        tokens reused. A miss overwrites the least recently used cached prompt when no slot is
        empty."""
        best, n = self._best(r)
        if best is not None:
            del self.prompts[best]
            return n
        if self.prompts and running + len(self.prompts) >= self.slots:
            self.prompts.popitem(last=False)
            self.stats.evicted_blocks += 1
        return 0

    def put(self, r: Request) -> None:
        """`r` finished: its slot is idle and keeps its prompt."""
        if shared_tokens(r):
            self.prompts[self._next] = r
            self._next += 1
            while len(self.prompts) > self.slots:
                self.prompts.popitem(last=False)
