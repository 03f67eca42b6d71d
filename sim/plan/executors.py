"""Where independent simulations run: this process, the local cores, or a Ray cluster.

An executor takes a picklable top-level function and a list of items and yields one `Outcome` per
item as soon as it finishes (completion order, not submission order). A crash outside the
function (a worker process killed, a Ray node lost) becomes an `Outcome` with `error` set, so the
caller records it and goes on. Simulations are deterministic functions of their inputs, so where
they run never changes their results.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Protocol

from sim.errors import ConfigError


@dataclass(frozen=True)
class Outcome:
    """What came back for one item: its return value, or the error that prevented one."""

    item: Any
    value: Any = None
    error: str | None = None


class Executor(Protocol):
    name: str

    def map_unordered(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[Outcome]:
        """Run fn(item) for every item; yield outcomes as they complete."""

    def close(self) -> None:
        """Release workers (idempotent)."""


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class SerialExecutor:
    """Runs every item in this process, in order. For one worker, debugging and tests."""

    name = "serial"

    def map_unordered(self, fn, items):
        for item in items:
            try:
                yield Outcome(item, fn(item))
            except Exception as e:  # noqa: BLE001 - any failure of one item is recorded, not fatal
                yield Outcome(item, error=_describe(e))

    def close(self) -> None:
        pass


class LocalExecutor:
    """A pool of worker processes on this machine (`concurrent.futures.ProcessPoolExecutor`).

    Workers are started with the `spawn` method: a fresh interpreter per worker is safe next to the
    progress-bar thread and behaves the same on Linux and macOS. At most `2 x workers` items are in
    flight so an interrupted sweep loses little queued work. Workers ignore SIGINT (a Ctrl-C reaches
    the whole process group): the parent decides. When the caller stops consuming early (Ctrl-C,
    SIGTERM), `close()` terminates the workers instead of waiting for their simulations to end, so
    the command stops at once.
    """

    name = "local"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = max(1, workers or os.cpu_count() or 1)
        self._pool: ProcessPoolExecutor | None = None
        self._abandoned = False  # the caller stopped before every item was done

    def map_unordered(self, fn, items):
        pending: dict[Future, Any] = {}
        queue = list(items)
        queue.reverse()
        breaks_in_a_row = 0
        try:
            while queue or pending:
                if self._pool is None:
                    self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                                     initializer=_ignore_sigint)
                try:
                    while queue and len(pending) < 2 * self.workers:
                        item = queue[-1]
                        pending[self._pool.submit(fn, item)] = item
                        queue.pop()
                    done, _ = wait(pending, return_when=FIRST_COMPLETED)
                except BrokenProcessPool as e:
                    done, broken = set(pending), e
                else:
                    broken = None
                for fut in done:
                    item = pending.pop(fut)
                    exc = fut.exception() if fut.done() else broken
                    if isinstance(exc, BrokenProcessPool):
                        broken = exc
                    if exc is None:
                        breaks_in_a_row = 0
                    yield Outcome(item, error=_describe(exc)) if exc else Outcome(item, fut.result())
                if broken is not None:
                    # A worker died (killed, out of memory): its items are reported failed above and
                    # a fresh pool takes the rest. A pool that keeps dying fails everything left.
                    self._pool.shutdown(wait=False, cancel_futures=True)
                    self._pool = None
                    breaks_in_a_row += 1
                    if breaks_in_a_row >= 3:
                        while queue:
                            yield Outcome(queue.pop(), error=f"worker pool keeps dying: {_describe(broken)}")
        finally:
            for fut in pending:
                fut.cancel()
            if pending or queue:
                self._abandoned = True

    def close(self) -> None:
        if self._pool is not None:
            workers = list((getattr(self._pool, "_processes", None) or {}).values())
            self._pool.shutdown(wait=False, cancel_futures=True)
            if self._abandoned:  # simulations nobody will read: stop them now, not when they end
                for p in workers:
                    if p.is_alive():
                        p.terminate()
                for p in workers:
                    p.join(timeout=1.0)
            self._pool = None


def _ignore_sigint() -> None:
    """Pool-worker initializer: SIGINT is for the parent, which stops the pool itself."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


class RayExecutor:
    """The same work as Ray tasks, on a local Ray instance or a cluster (`address`).

    If Ray is already initialised in this process (a test, a notebook) that instance is used and
    left running; otherwise `ray.init(address=...)` connects (address None starts a local one) and
    `close()` shuts it down.

    A Ray started here listens on `node_ip` only, 127.0.0.1 by default. Ray's gRPC servers (GCS,
    raylet, object manager, core workers, runtime-env agent) bind to the loopback interface when
    the node's IP is loopback (ray-project/ray PR #20190, "Listen on 127.0.0.1 if node ip is
    127.0.0.1"), but on Linux `ray.init(_node_ip_address="127.0.0.1")` replaces a loopback address
    with the machine's routable one (`services.resolve_ip_for_localhost`) unless Ray's single-node
    switch is off: `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, what Ray itself uses on macOS and Windows
    (`ray_constants.ENABLE_RAY_CLUSTER`). So a loopback `node_ip` sets that switch (environment, for
    the processes Ray starts, and the constant, for this one). Checked with `ss -ltnp` on Ray 2.60:
    GCS, raylet, workers and the driver on 127.0.0.1 only; without the switch they listened on every
    interface. No dashboard is started (`include_dashboard=False`; `dashboard_host` is `node_ip`
    too). Ray's servers run code for whoever may connect to them (Ray's security docs: Ray "expects
    to run in a safe network environment"; token authentication is on only in recent releases,
    2.60 says so at start-up). Another IP of this machine (`--ray-host`)
    opens the node to that network, for other nodes to join. Trace files and profiles are read by the workers from the paths in the
    items, so on a multi-node cluster they must exist at the same paths on every node (a shared
    filesystem), as with any Ray job that reads files.
    """

    name = "ray"

    def __init__(self, address: str | None = None, *, num_cpus: int | None = None,
                 node_ip: str = "127.0.0.1") -> None:
        local_only = not address and _is_loopback(node_ip)
        if local_only:
            os.environ[_RAY_SINGLE_NODE_SWITCH] = "0"
        try:
            import ray
            import ray._private.ray_constants as ray_constants
        except ImportError:
            raise ConfigError("--executor ray needs Ray: pip install 'infersim[ray]'", field="--executor") from None
        if local_only:  # read by ray.init when it resolves the node IP (module docstring)
            ray_constants.ENABLE_RAY_CLUSTER = False
        self._ray = ray
        self._owns = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if address:
                kwargs["address"] = address
            else:  # a new local Ray: its servers bind `node_ip` (loopback unless asked)
                kwargs["_node_ip_address"] = node_ip
                kwargs["dashboard_host"] = node_ip
                if num_cpus:
                    kwargs["num_cpus"] = num_cpus
            try:
                ray.init(**kwargs)
            except Exception as e:  # noqa: BLE001 - connection problems are a user-facing config error
                raise ConfigError(f"cannot start or reach Ray ({_describe(e)})", field="--ray-address") from None
            self._owns = True

    def map_unordered(self, fn, items):
        ray = self._ray
        remote = ray.remote(num_cpus=1, max_retries=0)(fn)
        refs = {remote.remote(item): item for item in items}
        try:
            while refs:
                ready, _ = ray.wait(list(refs), num_returns=1)
                for ref in ready:
                    item = refs.pop(ref)
                    try:
                        yield Outcome(item, ray.get(ref))
                    except Exception as e:  # noqa: BLE001 - a lost worker is one failed item
                        yield Outcome(item, error=_describe(e))
        finally:
            for ref in refs:
                ray.cancel(ref, force=True)

    def close(self) -> None:
        if self._owns and self._ray.is_initialized():
            self._ray.shutdown()
            self._owns = False


#: Ray's own switch for "this node runs alone" (macOS and Windows default): loopback node IP kept.
_RAY_SINGLE_NODE_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def _is_loopback(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def make_executor(kind: str, *, workers: int | None = None, ray_address: str | None = None,
                  ray_host: str = "127.0.0.1") -> Executor:
    """`local` (process pool; `workers`=1 runs in this process), or `ray` (a Ray started here binds
    `ray_host`)."""
    if kind == "local":
        if workers == 1:
            return SerialExecutor()
        return LocalExecutor(workers)
    if kind == "ray":
        return RayExecutor(ray_address, num_cpus=workers, node_ip=ray_host)
    raise ConfigError(f"unknown executor '{kind}'; choose local or ray", field="--executor")
