"""One engine replica as a discrete-event process: the SimPy side.

`replica` runs the plan -> price -> wait -> apply loop; `state` holds its queue, running lanes and
KV cache; `schedulers` decide each iteration's batch (static, continuous, chunked prefill, slots,
sequential); `kv` allocates KV cache (contiguous reservations or paged blocks); `prefix_cache`
reuses cached prompt prefixes; `metrics` records requests, iterations and token gaps and
summarises them; `build` wires a replica from a deployment's description.

May import: `sim.cost`, `sim.catalog`, `sim.errors`, `workloads.request`.
"""
