"""`PublicCorpus`: what one public fit works from, loaded once and passed to every step explicitly.

It holds the corpus rows (benchmarks/public/*.csv), the device micro-benchmarks that anchor a
transfer (benchmarks/public/device_microbench.csv), and the two properties the fit chooses across
devices and then prices every later row with: the MoE routing skew per routing key (`pool`, set by
`fitting.fit_routing`) and the K-quant mat-vec ALU cost of llama.cpp's Metal kernels
(`kquant_matvec_flops`, set by `fitting.fit_matvec_alu`). Nothing of this lives in module state:
two corpora (a test's synthetic one and the shipped one) can be fitted side by side.

A step given no corpus (`corpus=None`) uses a fresh `PublicCorpus()`: no rows, the shipped
micro-benchmarks, nothing fitted yet (the catalog's routing, no mat-vec roof).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from calibrate.public_corpus import MICROBENCH_FILE, MicroRow, PublicRow


@lru_cache(maxsize=1)
def _shipped_microbench() -> tuple[MicroRow, ...]:
    """The shipped micro-benchmark file, read once (a file of the checkout: never changes in a run)."""
    from calibrate.public_corpus import load_microbench

    return tuple(load_microbench())


@dataclass
class PublicCorpus:
    """The rows and micro-benchmarks of one fit, and the cross-device properties it has chosen."""

    rows: list[PublicRow] = field(default_factory=list)
    # device micro-benchmark rows (calibrate.public_corpus.load_microbench); None: the shipped file's
    micro: list[MicroRow] | None = None
    # routing key (`replay.routing_key`) -> expert_pool_fraction the rows are replayed with (`fit_routing`
    # sets it; a key not here: the catalog's)
    pool: dict[str, float] = field(default_factory=dict)
    # FLOP-equivalents per K-quant weight that llama.cpp's Metal mat-vec kernels spend at the fp32 ALU
    # rate (`Efficiency.kquant_matvec_flops_per_weight`, sim.cost.roofline `weight_stream_s`); None until
    # `fit_matvec_alu` chooses it (then every Apple profile's llama.cpp entry carries the choice)
    kquant_matvec_flops: float | None = None
    # False: every transfer keeps the datasheet anchor (what the transfer did before the micro-benchmarks)
    use_microbench: bool = True
    # per-device shares of the datasheet figures the micro-benchmarks reached (`microbench`), filled on use
    bandwidth_share_cache: dict = field(default_factory=dict, repr=False)
    matmul_share_cache: dict = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, folder: str | Path | None = None) -> PublicCorpus:
        """The corpus of a folder (default: the shipped benchmarks/public/) with its micro-benchmark file;
        a bad row stops here with a one-line error (calibrate.public_corpus)."""
        from calibrate.public_corpus import default_corpus_dir, load_corpus, load_microbench

        folder = Path(folder) if folder is not None else default_corpus_dir()
        return cls(load_corpus(folder), load_microbench(folder / MICROBENCH_FILE))

    def micro_rows(self) -> list[MicroRow] | tuple[MicroRow, ...]:
        """The micro-benchmark rows in use: this corpus's, else the shipped file's."""
        return self.micro if self.micro is not None else _shipped_microbench()

    def matvec_flops_for(self, device: str, family: str) -> float | None:
        """The K-quant mat-vec ALU cost (FLOP-equivalents per weight) a (device, family) entry carries: the
        fitted value for llama.cpp's kernels on Apple GPUs, None elsewhere (CUDA's mat-vec kernels
        multiply with int8 dot products and are not ALU-bound at these rates: no such roof)."""
        from sim.catalog.hardware import load_profile

        v = self.kquant_matvec_flops
        if not v or family != "ggml" or load_profile(device).vendor != "Apple":
            return None
        return v


def corpus_or_default(corpus: PublicCorpus | None) -> PublicCorpus:
    """`corpus`, or a fresh `PublicCorpus()` (shipped micro-benchmarks, nothing fitted) when None."""
    return corpus if corpus is not None else PublicCorpus()
