"""Capacity planning on top of the simulator: sweeps over options, SLO-constrained rate search,
replicas and cost, and HTML reports."""
