"""Scheduling policies in files of their own.

`sim.engine.schedulers` imports every module of this package when it is imported. A module here
defines a subclass of `sim.engine.schedulers.Scheduler` (or of a policy there) with a `name`; the
class joins `SCHEDULERS` and its name is one that presets, sweep files and `--scheduler` accept
(`sim.catalog.policies`). docs/contributing.md shows one.
"""
