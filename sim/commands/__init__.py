"""The `infersim` subcommands (`sim.cli` registers them lazily, so `--help` imports none of them).

The top layer: may import every other package.
"""
