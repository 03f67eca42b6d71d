"""Transfer: parameters for a (device, family) without rows from the fitted devices nearest to it.

`_tier` orders devices by closeness (generation, memory class, vendor, Apple package),
`achievable_share` and the micro-benchmark anchors (`calibrate.public.microbench`) put devices on a
common footing, and `transfer` takes the weighted mean of the donors.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from calibrate.public.corpus import PublicCorpus, corpus_or_default
from calibrate.public.era import ERA_TIERS, _era_step
from calibrate.public.microbench import (
    COMPUTE_ANCHOR_CLASSES,
    COMPUTE_ANCHOR_FAMILIES,
    allreduce_step_latency_us,
    bandwidth_anchor,
    compute_anchor,
)
from calibrate.public.params import BOUNDS, ROW_SIGMA, GroupParams
from sim.catalog.engine_config import base_family


# ---- transfer to devices without rows ---------------------------------------------------------------

def _memory_class(memory_type: str) -> str:
    m = memory_type.lower()
    for c in ("hbm", "gddr", "lpddr", "ddr"):
        if m.startswith(c):
            return c
    return m


@lru_cache(maxsize=None)
def device_traits(device: str) -> tuple[str, str, str]:
    """(generation, memory class, vendor) of a shipped profile, what `transfer` compares (read once per
    device: `_tier` asks for them thousands of times per fit, and a profile lookup scans the folders)."""
    from sim.catalog.hardware import load_profile

    hw = load_profile(device)
    return hw.generation, _memory_class(hw.memory_type), hw.vendor


@lru_cache(maxsize=None)
def device_package(device: str) -> str:
    """The profile's `package` ('pro', 'max', 'ultra' on Apple chips; '' elsewhere), see `_tier`."""
    from sim.catalog.hardware import load_profile

    return load_profile(device).package


def _tier(target: str, other: str, side: str = "compute") -> int:
    """How close two devices are for sharing efficiencies. Both orderings start with 0 same
    generation and memory class, 1 same vendor and memory class (the same market segment:
    datacenter HBM parts, GeForce GDDR cards, Apple's unified LPDDR — kernels tuned for one segment
    reach similar shares of its chips, and consumer datasheet peaks are quoted differently). Then:

    - side "compute" (matmul efficiencies, attention, GEMM start-up, all-reduce latency: what the
      family's kernel code reaches): 2 same vendor (llama.cpp's CUDA MMQ kernels run on every NVIDIA
      chip, its Metal ones on every Apple one), 3 same generation, 4 same memory class, 5 anything;
    - side "memory" (bandwidth efficiencies, the per-iteration floor and per-sequence cost: what the
      memory system and the chip's launch path allow): 2 same generation, 3 same memory class, 4
      anything.

    So the DGX Spark, the only LPDDR NVIDIA part, takes its matmul efficiency from every NVIDIA device
    of the family and its bandwidth and launch floor from the same-generation card. The orderings
    were chosen by leave-one-device-out error over the four combinations (1,059 rows, achievable-peak
    and link-latency transfer in all; median / p80 / p90 / single-stream decode median): generation
    first for both (the ordering before) 20.7 / 45.1 / 69.1 / 11.3%, vendor first for both 20.8 /
    39.5 / 51.3 / 12.5%, vendor for memory and generation for compute 22.2 / 45.5 / 68.7 / 12.5%,
    this split 19.6 / 37.7 / 50.9 / 11.3%. A hyper-parameter picked on all rows (one of four).

    Between two Apple chips the memory side goes by package first (`device_package`): 0 same
    package (Max with Max, Ultra with Ultra), 1 same generation, 2 any other Apple chip. What a
    Metal kernel reaches of the datasheet bandwidth follows the memory system more than the GPU
    generation: an Ultra is two Max dies over UltraFusion and decodes at a lower share of its
    800 GB/s than one Max die of its 400 (llama.cpp discussion #4167's LLaMA 7B Q4_0 tg128: M2
    Ultra 94.27 t/s, 0.45 of 800 GB/s; M2 Max 65.95, 0.63 of 400), so an Ultra held out took an
    M2 Max's share and came out fast (M2 Ultra single-stream decode +18.5% median). The matmul
    side keeps the generation (the GPU's kernels). On 1,141 rows (median / p80 / p90 /
    single-stream decode median, leave-one-device-out): generation for both sides 16.3 / 31.4 /
    45.8 / 10.4%, package for the memory side 15.9 / 31.1 / 45.9 / 8.3%; Apple rows alone 12.9% ->
    10.7% median. Chosen on all rows, like the orderings above."""
    g1, m1, v1 = device_traits(target)
    g2, m2, v2 = device_traits(other)
    if side == "memory" and v1 == v2 and m1 == m2:
        p1, p2 = device_package(target), device_package(other)
        if p1 and p2:
            if p1 == p2:
                return 0
            return 1 if g1 and g1 == g2 else 2
    if g1 and g1 == g2 and m1 == m2:
        return 0
    if v1 == v2 and m1 == m2:
        return 1
    if side == "memory":
        if g1 and g1 == g2:
            return 2
        return 3 if m1 == m2 else 4
    if v1 == v2:
        return 2
    if g1 and g1 == g2:
        return 3
    return 4 if m1 == m2 else 5


# The peak a kernel family can reach, as a share of the datasheet peak the profile quotes for a weight
# class's format (sim.catalog.quant.kernel_class). Efficiencies are fitted against the datasheet peak (what the
# simulator multiplies); a transfer compares devices by their share of the *achievable* peak, so a chip
# whose datasheet quotes a rate the family's kernels cannot use does not pass that gap on:
# - ggml f16 on GeForce cards: llama.cpp multiplies fp16 weights with cuBLAS in CUBLAS_COMPUTE_16F (fp16
#   accumulate; ggml-org/llama.cpp@f6d77a1b ggml/src/ggml-cuda/ggml-cuda.cu, ggml_cuda_op_mul_mat_cublas),
#   which GeForce chips run at twice the fp32-accumulate rate their profiles quote (rtx-3090/4090/5090
#   provenance `peak_tflops`: 142 vs 71, 330.3 vs 165.2, 419 vs 209.6 dense TFLOPS); datacenter parts
#   run both at one rate. Share 2.
# - ggml attention on GeForce cards: the fused (flash-attention) mma kernel accumulates KQ in fp32 and
#   VKQ in fp16 (ggml-org/llama.cpp ggml/src/ggml-cuda/fattn-mma-f16.cuh, `mma_tile_sizes`: T_C_KQ is a
#   float tile, T_C_VKQ a half2 one), half of the attention FLOPs each. On a GeForce chip, whose profile
#   quotes the fp32-accumulate rate P, the KQ half runs at P and the VKQ half at 2P: F/2/P + F/2/(2P) =
#   3F/(4P), an achievable rate of 4/3 P. Share 4/3 (datacenter parts and the DGX Spark: 1). Until
#   round 18 attention travelled on the f16 share (2), a rule drawn from 2023-24 rows that ran without
#   flash attention, whose attention is now priced as memory traffic (`row_flash_attention`). Held out
#   by device, all rows: 163 -> 160 rows more than 25% off, p90 29.5 -> 29.0% (the DGX Spark's 48 ->
#   45 rows, its median 16.7 -> 15.5%; nothing else moved).
# - ggml quantized (MMQ) on Hopper: llama.cpp's quantized matmuls issue Ampere-style mma.sync int8
#   instructions (ggml/src/ggml-cuda/mma.cuh); Hopper's datasheet int8/fp8 rate is reached only through
#   its warpgroup wgmma instructions, which the legacy ones reach about half of ("WGMMA has 2x
#   throughput of WMMA in H100", and "Hopper's Tensor Core ceiling is only reachable through wgmma":
#   public kernel write-ups, not an NVIDIA figure). Share 1/2, a coarse value; with it the A100 and
#   H100 PCIe llama.cpp prompts predict each other within 13% / 11% median (31% / 40% without).
ATTENTION_CLASS = "attention"  # `achievable_share`'s class for the attention kernels (not a weight class)
# llama.cpp's achievable share of a GeForce profile's quoted (fp32-accumulate) peak, by class (above)
GEFORCE_GGML_SHARE = {"f16": 2.0, ATTENTION_CLASS: 4.0 / 3.0}


def achievable_share(device: str, family: str, cls: str) -> float:
    from sim.catalog.hardware import load_profile

    hw = load_profile(device)
    if base_family(family) != "ggml":
        return 1.0
    if "GeForce" in (hw.display_name or ""):
        return GEFORCE_GGML_SHARE.get(cls, 1.0)
    if cls == "gguf" and hw.generation == "hopper":
        return 0.5
    return 1.0



# How much a fitted device counts in a transfer, per tier of distance (`_tier`): each step away
# weighs TIER_DECAY times less, and a device counts with the square root of its rows (a 4-row fit is
# a noisy estimate of its own parameters). Chosen by leave-one-device-out error over the corpus
# (median / p90 / single-stream decode median, before the achievable-peak shares and vendor tier):
# 1e-4 21.3% / 81% / 11.7%, 0.03 21.9% / 90% / 11.7%, 0.1 22.1% / 101% / 13.0%, 0.3 21.4% / 120% / 15.7%
# — the closest tier should decide, the rest only stands in for what it did not measure (a weight
# class it never ran).
TIER_DECAY = 1e-4
# An efficiency a donor's rows did not pin down counts this many tiers further than one they did
# (`transfer`, `GroupParams.pins`). Two cases, both measured after seeing these rows, like `_tier`'s
# orderings (docs/public-calibration.md, round 14):
# - a weight class the donor did not measure (its value is the geometric mean of its other classes).
#   Held out by device, the H100 SXM's fp16 TensorRT-LLM rows took the A100's fp16 values (the only
#   fp16 donor) instead of the H200's fp8 ones (the same GH100 chip, fp8 rows only): its 92 fp16 rows
#   read 12.6% off (median; +11.7% signed: fast). The Hopper efficiencies are a property of the chip's
#   GEMM and memory pipeline more than of the number format (the H100's own fit: fp16 0.55, fp8 0.50 of
#   the format's peak). With 1 the A100 and the H200 weigh alike: those rows 12.6 -> 6.3% (signed
#   +0.9%), all 216 H100 SXM TRT-LLM rows 10.2 -> 7.2%, all rows held out by device 11.3 -> 10.9% (p90
#   41.4% unchanged, nothing else moved); with 0 (another class as good as a measurement) 11.0 /
#   41.6%; with 2 nothing changes.
# - an efficiency of a measured class that the rows left near its prior (PIN_INFO): the M4 Pro's one
#   MLX row is a decode, so its MLX matmul efficiency is the prior's 0.40, and it was a donor of the M3
#   Max's MLX prompts, read 17.8% slow held out (21 rows) -> 4.9%; all rows held out by device
#   10.9 / 25.7 / 41.4% -> 10.2 / 26.0 / 40.2% (median / p80 / p90), by source 12.6 / 37.4% ->
#   12.1 / 36.8%, single-stream decode 8.1% unchanged; worse: the A100's llama.cpp prompts 11.7 ->
#   19.1% (25 rows). A fitted value at its bound counts as not pinned as well (the M4 Max's MLX
#   bandwidth at 1.0, lent to the M4 Pro and M2 Ultra MLX decodes: 20.8 -> 11.4%, 10.5 -> 4.5%; all
#   rows 9.7 -> 9.6% median, single-stream decode 8.1 -> 7.9%).
UNPINNED_TIERS = 1


# A donor counts in inverse proportion to how poorly the model follows its own rows: weight x
# (ROW_SIGMA / max(spread, SPREAD_FLOOR)) ** SPREAD_POWER, `GroupParams.spread` being the median
# |log(predicted / measured)| of its fit. Two sources on one device that disagree (the M1 Max's
# llama.cpp decodes: XiongjieDai's Llama 3 8B Q4_K_M table at 0.44 of the datasheet bandwidth,
# discussion #4167's Llama 2 7B Q4_0 at 0.58) leave a compromise the model cannot follow (spread
# 0.077, against 0.004-0.005 for the M2 and M4 Max), and that compromise was a nearest bandwidth
# donor of the M3 Max (its 20 decodes 10.8% slow held out, 4.7% with this rule). Inverse-variance weighting
# (power 2) is the textbook estimator for combining estimates of unequal precision; power 3 leans
# further. Held out by device, on the 1,232 rows with `ModelSpec.vocab_bytes` (median / p90 /
# single-stream decode median): without 9.7 / 40.1 / 7.9%; power 2 9.4 / 41.4 / 7.1%; power 3
# 9.3 / 41.9 / 6.7%; power 4 9.6 / 43.0 / 7.1%; power 3 with floor 0.02 9.8 / 43.3 / 7.1%, 0.05
# 9.5 / 41.2 / 7.4%; power 2 with floor 0.05 9.6 / 40.7 / 7.5%. Spreads of the decode or prompt rows
# alone for the memory and matmul sides: power 2 9.7 / 42.3 / 7.5%, power 3 10.1 / 42.9 / 7.2%;
# the spread corrected for the fit's degrees of freedom (x sqrt(rows / max(rows - parameters, 1)),
# which stops a 6-row group that its 8 parameters follow exactly from counting as precise): 9.7 /
# 42.7 / 7.3%.
# Chosen on all rows after seeing them, like `_tier`'s orderings, and narrowly: the figures on either
# side of (3, 0.03) were 0.4-0.8 points worse on decode. Within a tier only: TIER_DECAY (1e-4 a tier)
# still decides between tiers.
# The floor is ROW_SIGMA since round 24: a fit cannot be more precise than the scatter of the rows it
# follows, so a donor counts less only when its fit misses its own rows by more than that. Rechecked
# after round 23 had priced the unfused attention's K/V reads (the M1 Max's and the CUDA cards' long
# decodes, which the compromise fits had absorbed), a spread below 10% had stopped meaning precision:
# groups that their parameters follow to 1-3% (the RTX 5090's 4 rows, the L40S's 20, the RTX 3090's 23)
# weighed 16 times as much per row as the H200's 74 (spread 7.6%), and they lent the DGX Spark its
# matmul rate. Held out by device, rows past 25% of 1,234 (median / p90 / single-stream decode
# median), power 3: floor 0.03 128 (8.5 / 25.5 / 6.5%); 0.04 122; 0.05 119 (8.5 / 24.6 / 6.5%);
# 0.06 115; 0.08 112; ROW_SIGMA 112 (8.5 / 24.4 / 6.6%), the same as no spread weighting, since no
# fitted donor's spread exceeds 0.1 but the eager-mode DGX Spark vLLM group's; power 2: 0.03 124,
# 0.05 118. Again chosen on all rows after seeing them.
SPREAD_POWER = 3.0
SPREAD_FLOOR = ROW_SIGMA


def transfer(device: str, family: str, fits: dict[tuple[str, str], GroupParams],
             era: float | None = None, *, corpus: PublicCorpus | None = None) -> GroupParams | None:
    """Parameters for `device` under `family` from the other fitted devices of that family: a
    weighted geometric mean (arithmetic for the floor and per-sequence cost), weight =
    TIER_DECAY ** tier x sqrt(rows) x (ROW_SIGMA / spread) ** SPREAD_POWER, per weight class (a donor
    whose rows did not pin an efficiency or the GEMM start-up down, e.g. of a class it did not
    measure, counts UNPINNED_TIERS tiers further); the tier of matmul-side parameters is `_tier(..., "compute")`, of
    bandwidth, floor and per-sequence cost `_tier(..., "memory")`. `transferred_from` names the
    nearest devices of both. Matmul and attention efficiencies are averaged as shares of each device's
    achievable peak (`achievable_share`; attention on its own, `ATTENTION_CLASS`) and turned back into the target's
    share of its datasheet peak. The per-iteration floor and per-sequence cost come from devices of
    the same vendor only (`_launch_costs`), and they and the all-reduce latency only from donors whose
    rows ran with CUDA graphs (`GroupParams.eager`). `era` is the share of current-build rows the
    prediction is for (1 for a shipped profile: users run today's llama.cpp; a held-out group's own
    share when cross-validating); on the memory side a donor of the other era is ERA_TIERS tiers
    further (`_era_step`). The micro-benchmark anchors and the K-quant mat-vec cost are `corpus`'s
    (the shipped micro-benchmarks and none without). None when the family was fitted nowhere else."""
    corpus = corpus_or_default(corpus)
    others = [g for (d, f), g in fits.items() if f == family and d != device]
    donor_family = ""
    if not others and base_family(family) != family:
        # a llama.cpp backend family (ggml-vulkan, ggml-rocm) fitted on no other device: its base family's
        # fits (CUDA and Metal llama.cpp) are the nearest kernels there are, and `donor_family` says so
        donor_family = base_family(family)
        others = [g for (d, f), g in fits.items() if f == donor_family and d != device]
    if not others:
        return None

    def tier(g: GroupParams, side: str) -> int:
        return _tier(device, g.device, side) + (ERA_TIERS * _era_step(era, g) if side == "memory" else 0)

    def weight(g: GroupParams, side: str = "compute") -> float:
        trust = 1.0 if g.spread is None else (ROW_SIGMA / max(g.spread, SPREAD_FLOOR)) ** SPREAD_POWER
        return TIER_DECAY ** tier(g, side) * math.sqrt(max(len(g.rows), 1)) * trust

    def wgeo(pairs) -> float:
        w = np.array([a for a, _ in pairs])
        return float(np.exp(np.sum(w * np.log([b for _, b in pairs])) / np.sum(w)))

    def wmean(pairs) -> float:
        w = np.array([a for a, _ in pairs])
        return float(np.sum(w * np.array([b for _, b in pairs])) / np.sum(w))

    classes = sorted({c for g in others for c in g.seen_classes})
    def measured(g: GroupParams, what: str, c: str = "") -> float:
        # a donor offers an efficiency its rows did not pin down (a class it did not measure: the geometric
        # mean of its measured classes, `GroupParams.compute_for`; or one left at the prior) UNPINNED_TIERS
        # tiers further than a donor whose rows pinned it
        return 1.0 if g.pins(what, c) else TIER_DECAY ** UNPINNED_TIERS

    def anchor(g: GroupParams, c: str) -> float:
        # library GEMMs travel as shares of a GEMM micro-benchmark both devices ran (`compute_anchor`)
        library = family in COMPUTE_ANCHOR_FAMILIES or c in COMPUTE_ANCHOR_CLASSES.get(family, ())
        return compute_anchor(device, g.device, corpus) if library else 1.0

    # bandwidth efficiencies travel as shares of what a micro-benchmark reached on each device, where
    # both devices ran the same one (`bandwidth_anchor`; 1 = the datasheet anchor), capped at the
    # datasheet peak as a fitted value is
    bw = {c: min(BOUNDS["bandwidth"][1],
                 wgeo([(weight(g, "memory") * measured(g, "bandwidth", c),
                        g.bandwidth_for(c) * bandwidth_anchor(device, g.device, corpus)) for g in others]))
          for c in classes}
    def achievable(what: str, cls: str, donors) -> float:
        # a weighted geometric mean of [(weight, donor, value)] taken as shares of each device's
        # achievable peak (`achievable_share`) and turned back into the target's datasheet share, capped
        # at the bound a fitted value has
        return min(BOUNDS[what][1], achievable_share(device, family, cls)
                   * wgeo([(w, v / achievable_share(g.device, family, cls)) for w, g, v in donors]))

    comp = {c: achievable("compute", c, [(weight(g) * measured(g, "compute", c), g, g.compute_for(c) * anchor(g, c))
                                         for g in others])
            for c in classes}
    nearest = set()
    for side in ("compute", "memory"):
        best = min(tier(g, side) for g in others)
        nearest |= {g.device for g in others if tier(g, side) == best}
    # the floor and the all-reduce latency are the launch path's: eager-mode donors do not lend them
    graphs = [g for g in others if not g.eager]
    floor_ms, seq_ms = _launch_costs(device, [(weight(g, "memory"), g) for g in graphs], wmean)
    # the all-reduce latency is the launch path's too: a donor of the other software era (`_era_step`:
    # TensorRT-LLM's PyTorch flow against its 0.x engines) is ERA_TIERS tiers further, as on the memory
    # side. Without it the B200 / GB200 Llama 3.1 405B TP4 rows (PyTorch flow) set the A100's 0.13-engine
    # TP2-TP8 rows held out 5-13 points slower (its p90 16.4 -> 16.8%); set after seeing that
    lat_donors = [(weight(g) * TIER_DECAY ** (ERA_TIERS * _era_step(era, g)), g)
                  for g in graphs if g.lat_us is not None]
    lat_us = _transfer_latency(device, lat_donors, wgeo, wmean, corpus)
    return GroupParams(
        device, family, bw, comp,
        achievable("attention", ATTENTION_CLASS,
                   [(weight(g) * measured(g, "attention"), g, g.attention) for g in others]),
        floor_ms, seq_ms,
        wmean([(weight(g) * measured(g, "half_rows"), g.half_rows) for g in others]),
        lat_us,
        transferred_from=sorted(nearest), seen_classes=(), current_share=era,
        # without donors `_transfer_latency` gives the device's own micro-benchmark (or None)
        lat_from_microbench=not lat_donors and lat_us is not None,
        kquant_matvec_flops=corpus.matvec_flops_for(device, family),
        donor_family=donor_family,
    )


def _launch_costs(device: str, donors: list, wmean) -> tuple[float, float]:
    """Per-iteration floor and per-sequence cost [ms] for `device` from fitted donors [(weight,
    GroupParams)] of the same vendor; with none, the profile's own `iteration_overhead_ms` and
    `per_sequence_overhead_ms` (its engineering estimates, which its provenance says are unmeasured).
    The floor is the engine's launch path on that vendor's runtime — kernel launches and graph
    replays through CUDA or HIP, the host's scheduling between steps — not a property of the memory
    or the kernels' arithmetic, so it does not cross vendors: held out, the MI300X's vLLM rows (HIP,
    vLLM 0.9-0.10) took the NVIDIA parts' floors fitted on 2024's vLLM (2.2 ms on the H100, 4.2 ms on
    the A100, against none on the MI300X's own rows) and read 90-132% slow at batch 1 (72.9% median;
    46.9% with this rule, all rows held out by device p90 44.4% -> 42.5%, nothing else moved; chosen
    after seeing those rows, like `_tier`'s orderings)."""
    from sim.catalog.hardware import load_profile

    me = load_profile(device)
    mates = [(w, g) for w, g in donors if load_profile(g.device).vendor == me.vendor]
    if not mates:
        return me.iteration_overhead_ms, me.per_sequence_overhead_ms
    return wmean([(w, g.floor_ms) for w, g in mates]), wmean([(w, g.seq_ms) for w, g in mates])


def _transfer_latency(device: str, donors: list, wgeo, wmean, corpus: PublicCorpus) -> float | None:
    """All-reduce step latency for `device` from fitted donors [(weight, GroupParams)]: the fitted
    latency as a multiple of each donor's own link latency (profile `interconnect_latency_us`: NVLink
    5 us, PCIe 10 us), applied to the target's link. What a family's collectives add to a link's
    latency (launches, synchronisation, the ring's steps) carries over between devices; the link does
    not: an L40S's PCIe all-reduce held out and priced at the NVLink parts' fitted latency was 67%
    fast (median) on its tp4/tp8 TensorRT-LLM rows, 53% with the multiple. A plain weighted mean
    when a link latency is 0 (unified-memory devices).

    With no donor (no other device of the family ran with CUDA graphs), the device's own measured
    collective step latency (`allreduce_step_latency_us`) replaces the profile's engineering default,
    else None (the profile's). Not as an anchor between donors: NCCL's small-message time does not
    follow the engines' own all-reduce kernels (TensorRT-LLM's fitted step latency is 1.15x the
    H100's on the A100; NCCL's is 1.7x). Held out by device, the MI300X's 64 vLLM rows (then without a
    graph-mode donor; the H100 SXM's SGLang rows, added after, are one) had been priced at the profile's 5 us against their own fitted 2.7 and read 30.8%
    off (median; 41 of them > 25%); at RCCL's 3.47 us, 13.0% (16 > 25%); all rows 9.3 / 37.9% ->
    9.0 / 31.9% (median / p90), nothing else moved (docs/public-calibration.md, round 16)."""
    from sim.catalog.hardware import load_profile

    if not donors:
        return allreduce_step_latency_us(device, corpus)
    link = {d: load_profile(d).interconnect_latency_us for d in {device, *(g.device for _, g in donors)}}
    if all(v > 0 for v in link.values()):
        return link[device] * wgeo([(w, g.lat_us / link[g.device]) for w, g in donors])
    return wmean([(w, g.lat_us) for w, g in donors])
