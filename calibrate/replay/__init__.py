"""Replay a request trace on a real engine and record what it measured.

Two drivers serve the same trace with the same timing rules (`dispatch`): `http` streams
`/v1/completions` from an OpenAI-compatible server, `local` runs llama.cpp in process with
continuous batching. Both produce `ReplayResult`s written in `infersim run`'s output schema
(`records`), so a measured run and a simulated one compare field by field.

The real-engine side of `infersim validate`: may import the simulator (its metrics, the replica's
arrival rules, `simulate()` to compare), never the other way round.
"""

from calibrate.replay.errors import EngineUnreachable
from calibrate.replay.records import ReplayResult, RequestRecord

__all__ = ["EngineUnreachable", "ReplayResult", "RequestRecord"]
