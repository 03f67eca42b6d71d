"""Request traces: the JSONL format (`request`, `trace`), generators of synthetic traffic
(`generate`), importers of public traces (`importers`: Azure, BurstGPT, Mooncake, ShareGPT, vLLM
JSON), statistics (`stats`) and the `infersim trace` commands (`cli`).

May import: `sim.errors` only; the simulator imports it, never the other way round.
"""
