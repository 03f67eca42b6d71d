"""infersim: a discrete-event simulator and capacity planner for LLM inference.

Packages, lowest layer first (each imports only the ones before it; tests/test_architecture.py
checks it): `sim.errors`/`sim.files` (shared), `sim.catalog` (profiles, models, formats, engine
presets), `sim.cost` (seconds per iteration, memory), `sim.engine` (one replica as a SimPy
process), `sim.cluster` (`simulate()`: one replica, several, or disaggregated pools), `sim.api`
(the Python API), `sim.plan` (sweeps, SLO search, reports), `sim.commands`/`sim.cli` (the
`infersim` command). The real-engine side (probes, fits, replays) is the `calibrate` package.
See docs/architecture.md.
"""

__version__ = "0.1.0"
