"""SGLang's receive interval: when the scheduler reads the requests that have reached it.

SGLang's scheduler loop (managers/scheduler.py `event_loop_normal` / `event_loop_overlap`) starts each pass with
`recv_requests()`, which with `--scheduler-recv-interval N > 1` first asks a `SchedulerRecvSkipper`
(managers/scheduler_recv_skipper.py): a counter grows by the weight of the last pass's forward mode, 1 for
DECODE (and TARGET_VERIFY), 1 for a pass with no batch, 1000 for any other mode (EXTEND, MIXED: environ.py
SGLANG_SCHEDULER_RECV_SKIPPER_WEIGHT_* defaults, sgl-project/sglang PR #13855); when it reaches N it is reset and
the socket is read, else the pass schedules without reading it. So a request that reaches a decoding server
waits for the N-th decode step since the last read; after a prefill step, or on an idle server (whose loop
spins through passes with no batch in microseconds), the next pass reads it.

`RecvGate` keeps that counter for the replica (sim.engine.replica): the replica holds arrived requests in an
inbox and moves them to the waiting queue only when `due()`.
"""

from __future__ import annotations

#: the skipper's weight of a pass that was not a decode (EXTEND, MIXED): SGLANG_SCHEDULER_RECV_SKIPPER_WEIGHT_DEFAULT
NON_DECODE_WEIGHT = 1000


class RecvGate:
    """The receive counter of one replica (`interval` = --scheduler-recv-interval, > 1)."""

    def __init__(self, interval: int) -> None:
        if interval < 2:
            raise ValueError(f"a receive gate needs an interval of at least 2, got {interval}")
        self.interval = int(interval)
        self.counter = self.interval  # a fresh server reads its socket on its first pass

    def due(self) -> bool:
        """Whether the next pass reads the arrived requests."""
        return self.counter >= self.interval

    def read(self) -> None:
        """The pass read the socket: the counter starts again."""
        self.counter = 0

    def after_decode(self, steps: int) -> None:
        """`steps` decode passes ran. A run that passed a polling pass (the replica runs past one only while
        no request can arrive) read nothing there: the counter restarted at it."""
        n = self.counter + int(steps)
        self.counter = n if n <= self.interval else (n - 1) % self.interval + 1

    def after_other(self) -> None:
        """A prefill (extend) or mixed pass ran, or the server idled: the next pass reads."""
        self.counter += NON_DECODE_WEIGHT

    def steps_to_read(self) -> int:
        """Decode passes until the pass that reads (at least 1)."""
        return max(1, self.interval - self.counter)
