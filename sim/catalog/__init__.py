"""The catalog: what the simulator is told about the world, read from files and validated.

Hardware profiles (`hardware`, from `hardware_profiles/*.yaml`), models (`models` and the catalog
`data/models.yaml`; `model_readers` for GGUF headers and Hugging Face configs; `lookup.get_model`
takes a catalog name or either file), number formats (`quant`), engine presets (`engine_config`,
from `engines/*.yaml`), the per-process cache of all three (`cache`) and the expected error of a
profile's predictions (`accuracy`, from the public-measurement fit's residuals).

May import: `sim.errors`, `sim.files`. Nothing in it prices or simulates anything.
"""
