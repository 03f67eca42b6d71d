"""Several replicas and the entry point that runs a simulation.

`simulate` runs one replica or several behind a router (`replicas`, `router`); `disagg` splits
prefill and decode over two pools with a KV transfer between them.

May import: `sim.engine`, `sim.cost`, `sim.catalog`, `sim.errors`, `workloads`.
"""
