"""The cost model: seconds for one engine iteration, and the memory that decides what fits.

`roofline` prices one iteration on one device (compute vs memory roofline plus overheads) with the
free parameters in `params`; `decode_runs` has the exact closed forms for runs of decode steps
(the simulator's fast-forward); `llamacpp` holds llama.cpp's own kernel and batching rules that the
roofline calls (CPU GEMM start-up, ubatch passes, a calibrated decode correction); `parallel`
places a model over several devices (tensor/pipeline parallel, partial offload); `speculative`
wraps a cost model for speculative decoding; `memory` sizes weights, activations and KV capacity.

May import: `sim.catalog`, `sim.errors`. Knows nothing of requests, queues or time.
"""
