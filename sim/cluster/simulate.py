"""`simulate(...)`: one replica serving a request stream, or several behind a router; returns a `SimResult`.

The entry point the API, the planner and the calibrations call. One replica runs on a bare clock
(`sim.engine.build.LoneClock`); several share a simpy clock (`sim.cluster.replicas`).
Deterministic: nothing in a run is random, so the same inputs give byte-identical summaries (the
seed is recorded for tools that generate traces).
"""

from __future__ import annotations

from collections.abc import Iterable

from sim.catalog.engine_config import EngineConfig
from sim.catalog.hardware import HardwareProfile
from sim.catalog.models import ModelSpec
from sim.cost.params import CostParams
from sim.engine.build import LoneClock, SimResult, build_replica, check_drained, replica_parts, replica_summary
from workloads.arrivals import ArrivalSource
from workloads.request import Request


def simulate(
    requests: Iterable[Request],
    *,
    hw: HardwareProfile,
    model: ModelSpec,
    quant: str | None,
    engine: EngineConfig,
    concurrency: int | None = None,
    seed: int = 0,
    record_iterations: bool = True,
    cost_params: CostParams | None = None,
    fast_forward: bool = True,
    check_invariants: bool = False,
    config_extra: dict | None = None,
    replicas: int = 1,
    router: str | None = None,
) -> SimResult:
    """Simulate one replica of `engine` serving `requests` with `model` in `quant` on `hw` (or
    `replicas` of them behind `router`: `sim.cluster`).

    `requests` is streamed (an iterator of 1M requests is never materialised). `concurrency=N`
    runs a closed loop: N clients, each sending the next trace request when its previous one is
    done (trace arrival times ignored). `cost_params` replaces the profile-derived parameters
    (calibration). `fast_forward=False` runs every decode iteration as its own event (slow; for
    tests). `check_invariants` asserts KV conservation and clock monotonicity after every operation.
    """
    if replicas > 1 or router is not None:
        from sim.cluster.replicas import simulate_cluster

        return simulate_cluster(requests, hw=hw, model=model, quant=quant, engine=engine, replicas=replicas,
                                router=router or "round-robin", concurrency=concurrency, seed=seed,
                                record_iterations=record_iterations, cost_params=cost_params,
                                fast_forward=fast_forward, check_invariants=check_invariants,
                                config_extra=config_extra)
    parts = replica_parts(hw, model, quant, engine, cost_params)
    env = LoneClock()
    replica = build_replica(env, parts, ArrivalSource(requests, concurrency), record_iterations=record_iterations,
                            fast_forward=fast_forward, check_invariants=check_invariants)
    env.run(replica.run())
    if check_invariants:
        check_drained(replica)
    config = parts.config(concurrency=concurrency, seed=seed, config_extra=config_extra)
    summary = replica_summary(config, replica)
    return SimResult(summary, replica.log.frame, replica.iterations.frame,
                     extra={"kv_plan": parts.kvp, "final_clock_s": env.now, "events": len(replica.iterations.start_s)})
