"""Routing policies: which replica serves a request. They know policy, not time or physics.

A router sees what a real one does (vLLM's production-stack router, llm-d / Dynamo KV-aware
routers, SGLang's cache-aware router): the request as sent — prompt length, prefix identity,
the client's `max_tokens` — and what the replicas report — requests in flight and KV cache use.
It never sees the trace's true output length (`output_tokens`): the oracle boundary of the
schedulers holds here too.

Policies, picked by name from `ROUTERS`:
- `round-robin`: replica i, i+1, ... in turn.
- `least-outstanding`: the replica with the fewest requests sent and not finished (ties: lowest
  index) — vLLM production-stack's "least loaded" / Envoy's least-request.
- `least-kv`: the replica whose KV cache has the most free memory now, in tokens, after the
  demand already queued there (prompt + max_tokens of its waiting requests; the client's budget,
  never the true length); ties by outstanding requests. A fast-forwarded decode run books its KV
  blocks at its end, so this policy may route differently with `--step-by-step`.
- `prefix-affinity`: a request whose prompt has a shared prefix (`prefix_id`, or the first
  `prefix_blocks` hash) goes where that prefix went last, so its cached KV is reused (SGLang's
  cache-aware router, llm-d's prefix-cache scorer); unless that replica has more than
  `AFFINITY_SLACK` requests in flight above the least-loaded one, then (and for requests without
  a prefix) least-outstanding, and the prefix moves there.
"""

from __future__ import annotations

from typing import ClassVar, Protocol

from sim.errors import ConfigError
from workloads.request import Request

#: prefix-affinity gives up a prefix's replica when it has this many more requests in flight than
#: the least-loaded one (SGLang's cache-aware router uses a load-imbalance threshold the same way,
#: `balance_abs_threshold`, default 32; a smaller one suits the small replica counts simulated here).
AFFINITY_SLACK = 8


class ReplicaView(Protocol):
    """What a router may read of a replica."""

    outstanding: int  # requests routed there and not yet finished or rejected
    queued_tokens: int  # prompt + max_tokens of its requests routed and not yet admitted

    def kv_free_tokens(self) -> int: ...


class Router:
    name: ClassVar[str] = ""

    def __init__(self, n_replicas: int) -> None:
        self.n = n_replicas

    def choose(self, r: Request, views: list[ReplicaView]) -> int:  # pragma: no cover - abstract
        raise NotImplementedError


def _least_outstanding(views: list[ReplicaView]) -> int:
    return min(range(len(views)), key=lambda i: (views[i].outstanding, i))


class RoundRobin(Router):
    name = "round-robin"

    def __init__(self, n_replicas: int) -> None:
        super().__init__(n_replicas)
        self._next = 0

    def choose(self, r: Request, views: list[ReplicaView]) -> int:
        i = self._next
        self._next = (i + 1) % self.n
        return i


class LeastOutstanding(Router):
    name = "least-outstanding"

    def choose(self, r: Request, views: list[ReplicaView]) -> int:
        return _least_outstanding(views)


class LeastKV(Router):
    name = "least-kv"

    def choose(self, r: Request, views: list[ReplicaView]) -> int:
        return max(range(len(views)),
                   key=lambda i: (views[i].kv_free_tokens() - views[i].queued_tokens, -views[i].outstanding, -i))


class PrefixAffinity(Router):
    name = "prefix-affinity"

    def __init__(self, n_replicas: int) -> None:
        super().__init__(n_replicas)
        self.home: dict = {}  # prefix key -> replica that last served it

    @staticmethod
    def prefix_key(r: Request):
        if r.prefix_blocks:
            return ("h", r.prefix_blocks[0])
        if r.prefix_id is not None:
            return ("p", r.prefix_id)
        return None

    def choose(self, r: Request, views: list[ReplicaView]) -> int:
        least = _least_outstanding(views)
        key = self.prefix_key(r)
        if key is None:
            return least
        home = self.home.get(key)
        if home is not None and views[home].outstanding <= views[least].outstanding + AFFINITY_SLACK:
            return home
        self.home[key] = least
        return least


ROUTERS: dict[str, type[Router]] = {cls.name: cls for cls in (RoundRobin, LeastOutstanding, LeastKV, PrefixAffinity)}


def make_router(name: str, n_replicas: int) -> Router:
    """A routing policy by registry name."""
    try:
        cls = ROUTERS[name]
    except KeyError:
        raise ConfigError(f"unknown router '{name}'; known: {', '.join(ROUTERS)}", field="--router") from None
    return cls(n_replicas)
