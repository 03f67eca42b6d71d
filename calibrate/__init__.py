"""Calibration: measure a machine (llama.cpp probes) or a running server, fit the cost model's free
parameters, and write a hardware profile the simulator uses like any other.

Modules, in the order data flows: `tiny_gguf` (a tiny test model), `machine` (raw bandwidth and
GEMM peaks, machine description), `probe_worker` (the child process that times llama.cpp),
`probes` (plans, size checks, crash isolation), `endpoint` (timed streaming requests), `fit`
(least squares with held-out error), `profile` (profile building, atomic writing), `calibration`
(one calibration end to end), `check`, `cli` (`infersim calibrate`). The same for machines nobody
here can touch: `public_corpus` (published measurements), `public_fit` (its code split by job
under `public/`, one `PublicCorpus` passed to each step), `public_report`
(`infersim calibrate --public`). `replay/` runs a trace on a real engine for `infersim validate`.

May import: `sim.cluster` and everything below it, `sim.api`; not `sim.plan` or the command line.
"""
