"""Device micro-benchmarks (benchmarks/public/device_microbench.csv) as transfer anchors: the share
of its datasheet bandwidth and GEMM peak each device reached, and its collective step latency.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from calibrate.public.corpus import PublicCorpus, corpus_or_default


# ---- device micro-benchmarks: the bandwidth anchor of a transfer ---------------------------------------

# The kernel of each micro-benchmark (benchmarks/public/device_microbench.csv) whose figure anchors the
# transfer: the one stream-copy-like kernel every benchmark in the file has, one read stream and one
# write stream of the same size (BabelStream Copy, gpu-stream scale A[i] = B[i] * c, torch's
# Tensor.copy_, and the read probe of the only device that ran one), so two devices are compared by
# the same access pattern. Not the read-only kernels: BabelStream's Dot is a reduction with a fixed
# grid, and gpu-stream's read kernel does not saturate an H200 at its occupancy (2,756 GB/s against
# 3,534 for its triad), so they measure the kernel as much as the memory.
ANCHOR_KERNEL = {"babelstream": "Copy", "gpu-stream": "scale", "torch-copy": "copy", "read-probe": "read"}


def bandwidth_shares(device: str, corpus: PublicCorpus | None = None) -> dict[str, float]:
    """benchmark -> the device's micro-benchmark bandwidth (ANCHOR_KERNEL's kernel) / its profile's
    datasheet bandwidth: the share of the datasheet figure that kernel reached on it (`corpus`'s
    micro-benchmarks; the shipped ones without)."""
    corpus = corpus_or_default(corpus)
    cache = corpus.bandwidth_share_cache
    if device not in cache:
        from sim.catalog.hardware import load_profile

        peak = load_profile(device).memory_bandwidth_gb_per_s
        cache[device] = {
            r.benchmark: r.value / peak for r in corpus.micro_rows()
            if r.device == device and r.quantity == "memory_bandwidth" and ANCHOR_KERNEL.get(r.benchmark) == r.kernel}
    return cache[device]


def bandwidth_anchor(target: str, donor: str, corpus: PublicCorpus | None = None) -> float:
    """How much more of its datasheet bandwidth `target` reaches than `donor`, by the micro-benchmarks
    both ran: the geometric mean over their common benchmarks of (target's share) / (donor's share).
    A donor's fitted bandwidth efficiency (engine-achieved / datasheet) times this is the target's, if
    the engine reaches the same share of what the micro-benchmark reaches on both: the transfer then
    carries engine-achieved / micro-benchmark, not engine-achieved / datasheet. 1 (the datasheet
    anchor) when the two share no benchmark, or the corpus's `use_microbench` is off. Device data only: a held-out
    device's own micro-benchmark figure is used, none of its engine rows."""
    return _share_ratio(target, donor, bandwidth_shares, corpus_or_default(corpus))


def _share_ratio(target: str, donor: str, shares, corpus: PublicCorpus) -> float:
    """Geometric mean over the micro-benchmarks both devices ran of target's / donor's `shares`
    (benchmark -> share of the datasheet figure); 1 when they share none or `use_microbench` is off."""
    if not corpus.use_microbench or target == donor:
        return 1.0
    st, sd = shares(target, corpus), shares(donor, corpus)
    common = sorted(set(st) & set(sd))
    if not common:
        return 1.0
    return float(np.exp(np.mean([math.log(st[b] / sd[b]) for b in common])))


def matmul_shares(device: str, corpus: PublicCorpus | None = None) -> dict[str, dict[str, float]]:
    """benchmark -> {number format: the device's micro-benchmark GEMM rate (quantity `matmul`; the
    kernel names the format first, e.g. "fp8 16384x16384x16384") / its profile's datasheet peak of
    that format} (`corpus`'s micro-benchmarks; the shipped ones without)."""
    corpus = corpus_or_default(corpus)
    cache = corpus.matmul_share_cache
    if device not in cache:
        from sim.catalog.hardware import load_profile

        hw = load_profile(device)
        shares: dict[str, dict[str, float]] = defaultdict(dict)
        for r in corpus.micro_rows():
            if r.device == device and r.quantity == "matmul":
                fmt = r.kernel.split()[0]
                shares[r.benchmark][fmt] = r.value * 1e12 / hw.peak_flops(fmt)
        cache[device] = dict(shares)
    return cache[device]


# Kernel families whose GEMMs are the vendor libraries' (cuBLAS / CUTLASS / hipBLASLt) that a GEMM
# micro-benchmark times: their matmul efficiencies travel as shares of what that benchmark reached
# (`compute_anchor`). Not ggml (llama.cpp's own MMQ kernels; `achievable_share` holds what they can
# reach) nor mlx (Metal; no such figure).
COMPUTE_ANCHOR_FAMILIES = ("trtllm", "torch")
# Weight classes of other families whose GEMMs are the vendor library's too, so they travel the same way:
# llama.cpp multiplies f16 (and bf16) weights with cuBLAS / hipBLAS GEMMs (ggml/src/ggml-cuda/ggml-cuda.cu,
# `ggml_cuda_op_mul_mat_cublas`), only its quantized classes with its own MMQ kernels. Held out by device,
# all rows: 137 -> 136 rows past 25% (the A100's fp16 prompts, which borrow the H200's cuBLAS share scaled
# by the two GEMM micro-benchmarks), p90 25.78 -> 25.72%, nothing else moved (docs/public-calibration.md,
# round 22).
COMPUTE_ANCHOR_CLASSES = {"ggml": ("f16",)}


def compute_anchor(target: str, donor: str, corpus: PublicCorpus | None = None) -> float:
    """As `bandwidth_anchor`, for the matmul side: how much more of its datasheet GEMM peak `target`'s
    micro-benchmarks reached than `donor`'s, 1 when they ran none in common (or `use_microbench` is off).
    Per benchmark both ran: the mean log ratio over the number formats both ran it in; where they ran
    it in different formats, the ratio of their mean log shares (each a share of its own format's
    peak). Then the geometric mean over benchmarks.

    Two benchmarks: the Azure ND results time cuBLASLt at m = n = k = 16384 (A100 0.822 of its fp16
    peak, H100 SXM 0.696 and H200 0.690 of their fp8 peaks: Hopper's datasheet figures assume clocks
    its 700 W rarely holds under dense GEMMs); stas00's ml-engineering MAMF table times torch.matmul
    at the best of a shape search (A100 SXM 0.869 and H100 SXM 0.803 of bf16, H100 0.709 and H200
    0.734 of fp8, MI300X 0.511 of bf16 on ROCm 6.3 with TunableOp).
    - With the cuBLASLt figures alone, held out by device, the A100's TensorRT-LLM rows borrowed the
      H100's fp16 share (0.55 of peak against the A100's own 0.64) and read 9.3% slow (signed median,
      94 rows); with the anchor 7.5% (|median|, from 10.3%), all rows held out by device 10.2 -> 9.7%
      median (p90 40.2% unchanged), nothing else moved (docs/public-calibration.md, round 14).
    - The MAMF rows give the MI300X its first GEMM figure: its vLLM rows held out (no ROCm donor;
      the H100 SXM lends) had large batches 20-50% too short, its GEMMs priced at Hopper's share.
      With it (0.64 of the H100's bf16 share): 13.1 -> 12.6% median, 17 -> 13 of 64 rows past 25%;
      all rows held out by device 8.9 / 31.6% -> 8.9 / 31.5% (round 17)."""
    corpus = corpus_or_default(corpus)
    if not corpus.use_microbench or target == donor:
        return 1.0
    st, sd = matmul_shares(target, corpus), matmul_shares(donor, corpus)
    logs = []
    for bench in sorted(set(st) & set(sd)):
        both = sorted(set(st[bench]) & set(sd[bench]))
        if both:
            logs.append(float(np.mean([math.log(st[bench][f] / sd[bench][f]) for f in both])))
        else:
            logs.append(float(np.mean(np.log(list(st[bench].values())))
                              - np.mean(np.log(list(sd[bench].values())))))
    return float(np.exp(np.mean(logs))) if logs else 1.0


def allreduce_step_latency_us(device: str, corpus: PublicCorpus | None = None) -> float | None:
    """The device's measured collective step latency [us]: the median over its `allreduce_time`
    micro-benchmark rows (NCCL/RCCL all-reduce of 1-8 KB, where the time is latency) of time / (2 (N - 1)),
    the ring all-reduce's latency term (sim/cost/parallel.py `ring_allreduce_s`: 2 (N - 1) steps) for
    its N devices. None without such rows. The Azure ND results give 8-GPU nodes: H100 SXM 1.86 us,
    H200 2.16, A100 3.15, MI300X 3.47 (RCCL). From `corpus`'s micro-benchmarks (the shipped ones without)."""
    from calibrate.public_corpus import allreduce_devices

    corpus = corpus_or_default(corpus)
    steps = [r.value / (2 * (allreduce_devices(r.kernel) - 1)) for r in corpus.micro_rows()
             if r.device == device and r.quantity == "allreduce_time"]
    return float(np.median(steps)) if steps and corpus.use_microbench else None
