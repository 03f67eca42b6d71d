"""Capacity planning on top of the simulator: sweeps over options, SLO-constrained rate search,
replicas and cost, and HTML reports.

May import: `sim.api`, `sim.cluster` and everything below it; not `calibrate` or the command line.
"""
