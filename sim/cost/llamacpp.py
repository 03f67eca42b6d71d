"""llama.cpp's own kernel and batching rules, which the roofline (`sim.cost.roofline`) calls.

- `gemm_rows` / `gemm_start_rows`: the CPU matmul paths' start-up and leftover-tile passes
  (`matmul_half_rows`, fitted by calibration; GPU presets keep 0);
- `DecodeCorrection`: a llama.cpp-calibrated profile's measured/fitted decode factor per batch size;
- `split_equal` / `Pass`: how llama.cpp cuts one batch into passes over the weights with one KV
  stream per sequence; `split_simple` with one (unified) stream.

How llama.cpp cuts one batch into passes over the weights when every sequence has its own KV stream.

With `kv_unified` off (llama-server with an explicit `-np N`, the `--local` driver, the calibration's
probe contexts) the KV cache keeps one stream per sequence, and `llama_kv_cache::init_batch` splits
a `llama_batch` with `llama_batch_allocr::split_equal(n_ubatch, sequential=true)`
(src/llama-batch.cpp). Each call builds one ubatch — one forward pass over every weight matrix:

1. walk the batch in order and take the next unfinished sequence if it is the first taken or its
   seq_id is the last taken id + 1 (only *consecutive* seq_ids share a ubatch);
2. take the same number k of tokens from each: as many as the sequence with the fewest left
   still has, and no more than n_ubatch / (sequences taken), at least 1 (sequences are taken
   until more than n_ubatch are held: at most n_ubatch + 1 per pass);
3. repeat until every token is used.

So a batch of decodes in slots 0, 1 and 2 plus a prompt in slot 3 is *not* "a decode pass and a
prompt pass": the first pass takes one token from each of the four (the prompt's first token
rides with the decodes, without logits), the second the prompt's other tokens. Decodes in slots
0 and 2 are two passes, as are two prompts in slots 3 and 5. Which rows a pass has decides its
price on a CPU, where llama.cpp's matmul kernels change at 2 and at 4 rows (`sim.cost.llamacpp.gemm_rows`):
measured on Gemma 3 270M Q4_K_M, 1 thread, one decode at context 200 plus a 128-token prompt took
346 ms with the prompt in the next slot (a 2-row first pass) and 310 ms with the prompt in the slot
before (a 1-row decode pass, then the whole prompt); the 2-row pass costs what a 2-sequence decode
step does over a 1-sequence one (48.5 vs 13.1 ms).

`split_equal` reproduces the rule on whole pieces (one per sequence: its tokens are contiguous in
the batch, as every engine and the driver build them) and returns the passes; `CostModel.passes_time`
prices them. Used by the simulator (`EngineConfig.per_sequence_kv_streams`) and by the calibration
fit for the probes' mixed batches (`calibrate.fit.pass_features`), so both count the same passes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from sim.catalog.models import ModelSpec
from sim.catalog.quant import QuantFormat

if TYPE_CHECKING:
    from sim.catalog.engine_config import EngineConfig
    from sim.catalog.hardware import HardwareProfile


@dataclass(frozen=True, slots=True)
class Piece:
    """What one sequence puts into a batch: `tokens` new tokens after `context` cached ones, with
    the logits of its last token computed when `output` (a decode, a prompt's final chunk)."""

    seq: int
    tokens: int
    context: int | float
    output: bool = True


@dataclass(frozen=True, slots=True)
class Pass:
    """One ubatch: `tokens_per_seq` tokens from each of the sequences `seqs` (consecutive ids),
    whose cached tokens before the pass are `contexts`; `outputs` of its rows have logits."""

    tokens_per_seq: int
    seqs: tuple[int, ...]
    contexts: tuple[float, ...]
    outputs: int

    @property
    def tokens(self) -> int:
        return self.tokens_per_seq * len(self.contexts)


def split_equal(pieces: Sequence[Piece], n_ubatch: int | None = None) -> list[Pass]:
    """The passes llama.cpp runs for a batch holding `pieces` in this order (see the module
    docstring); `n_ubatch` None = no limit below the batch itself."""
    remaining = [int(p.tokens) for p in pieces]
    done = [0] * len(pieces)
    if len({p.seq for p in pieces}) != len(pieces) or min(remaining, default=1) < 1:
        raise ValueError("one piece per sequence, each with at least one token")
    passes: list[Pass] = []
    while True:
        chosen: list[int] = []
        last = 0
        for i, p in enumerate(pieces):
            if remaining[i] and (not chosen or p.seq == last + 1):
                chosen.append(i)
                last = p.seq
                if n_ubatch and len(chosen) > n_ubatch:
                    # llama.cpp stops taking sequences once it holds more than n_ubatch (it keeps
                    # that last one: n_ubatch + 1 sequences of one token each)
                    break
        if not chosen:
            return passes
        k = min(remaining[i] for i in chosen)
        if n_ubatch:
            k = min(k, max(1, n_ubatch // len(chosen)))
        passes.append(Pass(
            tokens_per_seq=k,
            seqs=tuple(pieces[i].seq for i in chosen),
            contexts=tuple(pieces[i].context + done[i] for i in chosen),
            outputs=sum(1 for i in chosen if pieces[i].output and remaining[i] == k),
        ))
        for i in chosen:
            remaining[i] -= k
            done[i] += k


def split_simple(pieces: Sequence[Piece], n_ubatch: int) -> list[list[Piece]]:
    """The passes llama.cpp runs for a batch holding `pieces` in this order when the KV cache is one
    stream (`kv_unified`, llama-server's default with auto parallel): `llama_batch_allocr::split_simple`
    (src/llama-batch.cpp) takes the batch's next n_ubatch tokens in order, whichever sequences
    they belong to, so a 2,048-token prompt is four passes of 512 and a pass may hold the decodes and
    the start of a prompt. Each pass is a list of pieces: a piece's tokens and context are its part of
    the sequence's tokens; it keeps `output` only when it holds the sequence's last token."""
    if n_ubatch < 1:
        raise ValueError("n_ubatch must be at least 1")
    passes: list[list[Piece]] = []
    current: list[Piece] = []
    room = n_ubatch
    for p in pieces:
        done = 0
        while done < p.tokens:
            take = min(room, int(p.tokens) - done)
            current.append(Piece(p.seq, take, p.context + done, p.output and done + take == p.tokens))
            done += take
            room -= take
            if room == 0:
                passes.append(current)
                current, room = [], n_ubatch
    if current:
        passes.append(current)
    return passes


# Activation rows (tokens) one tile of the multi-row matmul kernel covers: llamafile_sgemm's tinyBLAS
# picks 4-wide tiles on x86 (`mnpack`, ggml/src/ggml-cpu/llamafile/sgemm.cpp), then sweeps the
# leftover n mod 4 rows with narrower tiles in a second pass over the weights.
GEMM_TILE_ROWS = 4


def gemm_rows(rows, half_rows: float):
    """Effective rows of a matmul over `rows` activation rows (see the module docstring):

    - rows for a GEMV (rows < 2), and whenever n_1/2 = 0 (the plain roofline);
    - rows + n_1/2 for one tiled pass (2 <= rows <= 4, or rows a multiple of 4);
    - rows + n_1/2 + (n_1/2 + r) when r = rows mod 4 rows are left over past the first tile: the
      leftover rows take a second pass over the weights in narrower tiles (its own start-up, n_1/2)
      at half the per-row rate (they count twice). Measured with Gemma 3 270M Q4_K_M, 1 thread, a
      decode step of n sequences: 70 ms at 4, 104/116/137 at 5/6/7, 95 at 8, 120 at 12, 164-183 at
      13-15, 150 at 16 — linear in rows within multiples of 4, ~25 + 12 ms x r above them; with the
      n_1/2 of a calibration that probed none of the leftover cases this rule reproduces all 16
      (median error 2.7%, largest 5.4%) and adds no parameter.

    Scalars or arrays."""
    if not half_rows:
        return rows
    if isinstance(rows, (int, float)):
        if rows < 2:
            return rows
        left = rows % GEMM_TILE_ROWS if rows > GEMM_TILE_ROWS else 0
        return rows + half_rows + (half_rows + left if left else 0.0)
    r = np.asarray(rows, dtype=float)
    left = np.where(r > GEMM_TILE_ROWS, np.mod(r, GEMM_TILE_ROWS), 0.0)
    return r + half_rows * (r >= 2) + np.where(left > 0, half_rows + left, 0.0)


def gemm_start_rows(rows, half_rows: float):
    """Effective rows of the layers' matmuls (rows = tokens of the pass): `gemm_rows` without the
    leftover-tile pass — the GEMV at one row, the start-up n_1/2 from two rows on.

    Why the layers and the LM head differ: which rows a pass has can be told apart with llama.cpp's
    own pass structure (`sim.cost.llamacpp`), where a prompt's first token rides in a decode pass as a row
    of the layers without logits. Measured on Gemma 3 270M Q4_K_M (1 thread; layers Q5_0 / Q4_K /
    Q6_K, LM head the tied Q8_0 embedding): 1 decode + 1 riding row (2 rows in the layers, 1 in the
    head) cost 36 ms more than 1 decode, as much as a second decode (+35 ms) — the start-up is in the
    layers; 4 decodes + 1 riding row cost only 6 ms more than 4 decodes, while a fifth decode costs
    33 ms — the leftover pass is in the head (tinyBLAS, Q8_0). Refitting three full calibrations'
    probes this way lowered their held-out error (2.3 -> 1.8 %, 3.7 -> 3.0 %, 4 -> 3.3 %) and their
    mixed-iteration error (5.6 -> 0.9 %, 4.0 -> 2.8 %, 12 -> 6 %). Scalars or arrays."""
    if not half_rows:
        return rows
    if isinstance(rows, (int, float)):
        return rows + half_rows if rows >= 2 else rows
    r = np.asarray(rows, dtype=float)
    return r + half_rows * (r >= 2)



# llama.cpp's quantized matmul on CUDA (MMQ, ggml/src/ggml-cuda/mmq.cuh) covers the activation rows of a
# matrix in tiles of mmq_x rows. `mul_mat_q_case` takes the mmq_x in steps of 8 up to its largest (128
# on every NVIDIA GPU with int8 tensor cores, `get_mmq_x_max_host`) that needs the fewest tiles for
# `ncols_max` = every token of the batch, so the smallest multiple of 8 that holds the batch up to 128
# tokens, then 128.
MMQ_X_MAX = 128
MMQ_X_STEP = 8


def cuda_moe_expert_tile(vendor: str, kernel_family: str | None) -> int:
    """The MMQ tile width [rows] llama.cpp's CUDA backend covers each routed expert's rows with
    (`moe_expert_rows`): MMQ_X_MAX for llama.cpp's kernels on an NVIDIA GPU, 0 (no tile rule: the
    Hockney start-up per touched expert, `CostModel._layer_matmul_flops`) for every other engine or
    device. Not for llama.cpp's HIP build (recent builds size its RDNA tiles against the average
    rows per expert instead, mmq.cuh `ncols_opt`), nor Metal's or the CPU's kernels: no public row
    of those runs a MoE batch the rule could be checked on."""
    return MMQ_X_MAX if kernel_family == "ggml" and vendor == "NVIDIA" else 0


# Reads of each cached K/V element per pass by llama.cpp's attention without flash attention, per GPU
# backend (`unfused_kv_reads`).
UNFUSED_KV_READS = {"NVIDIA": 2.0, "Apple": 6.0}


def unfused_kv_reads(vendor: str, kernel_family: str | None) -> float:
    """How many times llama.cpp's attention kernels without flash attention fetch each cached K/V
    element in a pass (`CostModel` caps it at the GQA group, heads / kv_heads: one fetch per query
    head, nothing reused; sim.cost.roofline module docstring): UNFUSED_KV_READS for llama.cpp's
    kernels on an NVIDIA GPU (CUDA's batched cuBLAS GEMMs) or an Apple one (Metal's mat-vec
    kernels), 1 elsewhere (other engines fuse attention; no public row checks HIP or the CPU).

    Chosen per backend by the public fit's in-sample robust loss over the llama.cpp groups of that
    backend (every group refitted; docs/public-calibration.md, round 23), on a grid of 1-4 (CUDA)
    and 4, 6, no reuse (Metal): CUDA 385.4 at 1, 383.3 at 1.5, 381.9 at 2, 382.2 at 2.5, 383.7 at 3,
    386.6 at 3.5, 389.5 at 4; Metal 125.1 at 1, 108.2 at 4, 107.8 at 6, 108.7 with no reuse. The L2
    of an NVIDIA GPU catches about half of a Llama 3 group's four fetches; Apple's GPUs catch next to none (a Llama 3 70B
    group has eight query heads a K/V head, so 6 is the only value between 4 and no reuse there)."""
    if kernel_family != "ggml":
        return 1.0
    return UNFUSED_KV_READS.get(vendor, 1.0)


def llamacpp_kernel_args(hw, kernel_family: str | None, quant) -> dict:
    """The `CostModel` arguments that llama.cpp's kernels on `hw` set, one rule each (see each
    function): `moe_expert_tile` (`cuda_moe_expert_tile`), `mmq_tile_bandwidth`
    (`cuda_mmq_tile_bandwidth`) and `unfused_kv_reads` (`unfused_kv_reads`); every rule is off for
    the other kernel families. The simulator (`CostModel.from_names`) and the public fit
    (calibrate/public_fit.py) both price a row or a run through here."""
    return {"moe_expert_tile": cuda_moe_expert_tile(hw.vendor, kernel_family),
            "mmq_tile_bandwidth": cuda_mmq_tile_bandwidth(hw, kernel_family, quant),
            "unfused_kv_reads": unfused_kv_reads(hw.vendor, kernel_family)}


# MMQ's weight tile: mmq_y = 128 rows of the weight matrix per CTA on NVIDIA GPUs (mmq.cuh `get_mmq_y_host`),
# and the bytes per activation value of its q8_1 tiles (`block_q8_1_mmq`: 128 int8 values + 8 halves = 144 B
# per 128 values).
MMQ_Y = 128
MMQ_Q8_1_BYTES = 144.0 / 128.0
# Fewest rows a step must have for llama.cpp to take MMQ rather than its mat-vec kernels (MMVQ, batches of
# up to 8 rows: `ggml_cuda_should_use_mmvq`'s MMVQ_MAX_BATCH_SIZE)
MMQ_MIN_ROWS = 8


def cuda_mmq_tile_bandwidth(hw, kernel_family: str | None, quant) -> float:
    """Bytes/s the MMQ tile traffic of `mmq_tile_traffic_bytes` is priced at: the profile's datasheet
    memory bandwidth for llama.cpp's kernels on an NVIDIA GPU with quantized weights (MMQ), else 0 (no
    such term: f16/bf16 weights go through cuBLAS, other engines and devices have their own kernels).
    The datasheet figure, not a fitted share: the term is a floor no tile stream can beat, and it has
    no parameter of its own."""
    from sim.catalog.quant import kernel_class

    if kernel_family != "ggml" or hw.vendor != "NVIDIA" or kernel_class(quant, kernel_family)[0] != "gguf":
        return 0.0
    return hw.memory_bandwidth_gb_per_s * 1e9


def mmq_tile_traffic_bytes(tokens, dense_bytes: float, expert_bytes: float, n_active: int,
                           pool_experts: float, macs_per_token: float):
    """DRAM bytes llama.cpp's CUDA MMQ moves in one pass of `tokens` rows through the layers' quantized
    matmuls (the LM head, one row in a prompt pass, left out), with no L2 reuse. Scalars or arrays.

    `mul_mat_q`'s stream-k loop (ggml-cuda/mmq.cuh) walks each CTA's tiles with the column tiles
    innermost: a CTA loads its MMQ_Y-row weight tile once per mmq_x-row column tile of activations,
    and each column tile's q8_1 activations (MMQ_Q8_1_BYTES a value) once per weight tile. So

        dense weights x ceil(T / 128)  +  routed experts' weights x their tiles  +  T x MACs x 1.125 / 128

    - dense weights (`dense_bytes`): the attention and shared matrices, read once per 128-row column
      tile (mmq_x = MMQ_X_MAX from 128 rows on; fewer rows are one tile);
    - routed experts (MoE): each of the E_c pool experts (`pool_experts`) runs its rows in tiles of the
      batch's width m (`moe_expert_rows`), so its weights (`expert_bytes`, one expert, all layers) are
      read once per tile: E_c x sum_j P(X > j m) of them, X ~ Poisson(T k / E_c);
    - activations: every multiply-accumulate's input value is read once per 128-row weight tile:
      T x `macs_per_token` x 1.125 / 128.

    What this prices: on the DGX Spark (LPDDR5x, 273 GB/s) llama.cpp's prompt rate sits at this
    traffic over its datasheet bandwidth (Qwen2.5-7B Q8_0, 2,048-token batches: 2,276 tokens/s against
    a floor of 2,448), and the GeForce cards' MMQ rates scale with their bandwidth rather than their
    int8 peak (the fitted rates: RTX 4090, L40S, RTX 5090 and the Spark all reach ~0.11 TFLOP/s of
    MMQ per GB/s of datasheet bandwidth). L2 hits make the real traffic smaller, so the floor can
    only err on the slow side. The public fit prices a device's own rows without it and its fitted
    matmul rates never run into it there; it binds where a rate transferred from other devices
    would outrun the memory (calibrate/public_fit.py `row_mmq_tiles`; docs/public-calibration.md,
    round 22)."""
    if np.ndim(tokens) == 0:  # the simulator's steps repeat a few token counts: remembered per count
        return _mmq_tile_traffic_one(float(tokens), float(dense_bytes), float(expert_bytes), int(n_active),
                                     float(pool_experts), float(macs_per_token))
    t = np.asarray(tokens, dtype=float)
    weights = dense_bytes * np.ceil(t / MMQ_X_MAX)
    if expert_bytes > 0 and n_active > 0:
        # each routed expert's weights once per tile of its rows: moe_expert_rows without start-up / tile width
        weights = weights + expert_bytes * moe_expert_rows(t, n_active, pool_experts, MMQ_X_MAX, 0.0) / mmq_tile_width(t)
    return weights + t * macs_per_token * MMQ_Q8_1_BYTES / MMQ_Y


@lru_cache(maxsize=4096)
def _mmq_tile_traffic_one(t: float, dense_bytes: float, expert_bytes: float, n_active: int, pool_experts: float,
                          macs_per_token: float) -> float:
    """`mmq_tile_traffic_bytes` of one token count (the array formula on a 0-d array), remembered."""
    return float(mmq_tile_traffic_bytes(np.asarray([t]), dense_bytes, expert_bytes, n_active, pool_experts,
                                        macs_per_token)[0])


def mmq_tile_width(tokens, tile: int = MMQ_X_MAX):
    """MMQ's column-tile width m for a batch of `tokens` rows: the smallest multiple of MMQ_X_STEP that
    holds it, at most `tile` (`mul_mat_q_case`), and at least one step. Scalars or arrays."""
    return np.maximum(np.minimum(float(tile), np.ceil(np.asarray(tokens, dtype=float) / MMQ_X_STEP) * MMQ_X_STEP),
                      float(MMQ_X_STEP))


def moe_expert_rows(tokens, n_active: int, pool_experts: float, tile: int, half_rows: float):
    """Row-equivalents the routed experts' matmuls cost in one MoE layer for a pass of `tokens`
    tokens under llama.cpp's CUDA MMQ (`cuda_moe_expert_tile`), summed over experts. Scalars or arrays.

    - One token (T = 1): the mat-vec kernel with expert ids (`ggml_cuda_mul_mat_id`: MMVQ when the
      batch has one token), k rows, as in a dense GEMV.
    - Two or more: MMQ with expert ids for every touched expert. Its tile width m follows the whole
      batch (min(128, T rounded up to 8), MMQ_X_MAX), not the rows an expert got, so an expert with
      X rows runs ceil(X / m) tiles of m rows, the empty ones masked but computed, and each tile pays
      the kernel's start-up (Hockney's n_1/2, `matmul_half_rows`: the weight tile loaded and
      dequantized into shared memory once per column tile): ceil(X / m) x (m + n_1/2) rows.
      A 2,048-token prompt of gpt-oss-120b (128 experts, top 4) gives an expert 64 rows on
      average: one 128-row tile, twice the rows it has.
    - X, the rows of one of the E_c experts the batch picks from (`expected_distinct_experts`'
      `pool_experts`), is Poisson with mean T k / E_c (k of E_c per token, independently), so the
      expected tiles are E_c x sum_{j >= 0} P(X > j m), with scipy's Poisson survival function.

    No parameter of its own (the tile rule is the kernel's; n_1/2 is the profile's fitted start-up).
    Checked against the DGX Spark's llama-batched-bench MoE rows and the RTX 4090 / 3090 ones of PRs
    #15631 and #22298, held out by device (docs/public-calibration.md, round 21).

    The simulator's steps repeat a few token counts, so a scalar or a small array is summed once per
    token count (`_moe_expert_rows_one`): 16.6 us a warm step against 32 us recomputing."""
    if np.ndim(tokens) == 0:
        return _moe_expert_rows_one(float(tokens), int(n_active), float(pool_experts), int(tile), float(half_rows))
    t = np.asarray(tokens, dtype=float)
    if t.size <= 64:
        return np.array([_moe_expert_rows_one(float(x), int(n_active), float(pool_experts), int(tile), float(half_rows))
                         for x in t.flat]).reshape(t.shape)
    return _moe_expert_rows_array(t, n_active, pool_experts, tile, half_rows)


@lru_cache(maxsize=4096)
def _moe_expert_rows_one(tokens: float, n_active: int, pool_experts: float, tile: int, half_rows: float) -> float:
    return float(_moe_expert_rows_array(np.asarray(tokens), n_active, pool_experts, tile, half_rows))


def _moe_expert_rows_array(t: np.ndarray, n_active: int, pool_experts: float, tile: int, half_rows: float):
    """`moe_expert_rows` on an array of token counts, every element summed."""
    from scipy.special import pdtrc  # Poisson survival; scipy stays out of a dense model's imports

    lam = t * n_active / pool_experts
    m_safe = mmq_tile_width(t, tile)
    # P(X > j m) is below 1e-15 past the mean plus 8 standard deviations
    j_max = int(np.max((lam + 8.0 * np.sqrt(lam) + 8.0) / m_safe)) + 1
    j = np.arange(j_max + 1, dtype=float).reshape((-1,) + (1,) * t.ndim)
    tiles = pdtrc(j * m_safe, lam).sum(axis=0)
    return np.where(t >= 2, pool_experts * tiles * (m_safe + half_rows), t * n_active)

@dataclass(frozen=True)
class DecodeCorrection:
    """Measured over fitted decode step time, by decode batch size, from a calibration's own probes.

    The cost model's kernel terms (a GEMV at one row, tiled GEMMs with a start-up and a leftover pass
    from two rows on, `gemm_rows`) are an idealisation of llama.cpp's CPU matmul paths, which differ
    by tensor type and by batch width (tinyBLAS tiles for Q8_0/Q5_0 weights, repacked GEMM and GEMV
    for Q4_K, vec_dot for Q6_K). Five full calibrations of Gemma 3 270M Q4_K_M on one 2-core EPYC
    (1 thread) left the same signs at the same batch sizes: 2-sequence steps 5-18 % faster than
    fitted, 3- and 4-sequence steps 4-19 % slower, 16 at short context 9-17 % faster — a shape no smooth
    rows(n) reproduces (12 and 16 sequences cost the same). The validation cases inherited exactly
    these errors (2 clients: ITL +10 %; 4 clients: ITL -10 %). So, as profile-driven simulators do
    (Vidur: operator times measured per shape and interpolated), a profile calibrated with llama.cpp
    probes also corrects decode steps of the model and engine it measured by

        factor(n) = exp(interp(n; probed batch sizes b, mean over b's points of log(measured / fitted)))

    linear in n between probed sizes and held at the nearest one outside them (1 and 16 in the full
    plan). Only that model (name and quantization), that engine, and one device: for any other
    model, engine or a placement over several devices the parametric cost model stands alone, and
    the fit itself (calibrate.fit) never sees the correction. `calibration.decode_correction: false`
    in the profile turns it off.
    """

    batches: tuple[int, ...]  # probed decode batch sizes, ascending
    log_ratios: tuple[float, ...]  # mean log(measured / fitted) of each size's probe points
    source: str = ""

    def factor(self, n: int | float) -> float:
        """The step-time multiplier for a decode pass of `n` sequences."""
        return math.exp(float(np.interp(n, self.batches, self.log_ratios)))

    def to_dict(self) -> dict:
        return {"source": self.source, "factor_by_batch": {b: round(math.exp(r), 4)
                                                           for b, r in zip(self.batches, self.log_ratios)}}

    @classmethod
    def from_profile(cls, hw: "HardwareProfile", model: ModelSpec, quant: QuantFormat,
                     engine: "EngineConfig | None") -> "DecodeCorrection | None":
        """The correction `hw`'s calibration measured for `model` at `quant` under `engine`, if any."""
        cal = hw.calibration or {}
        if cal.get("method") != "llama.cpp probes" or cal.get("decode_correction") is False:
            return None
        measured = cal.get("model") or {}
        if engine is None or engine.name != cal.get("engine") or measured.get("name") != model.name \
                or measured.get("quantization") != quant.name:
            return None
        return cls.from_points(cal.get("probe_points") or [], source=f"{hw.name}: calibration "
                               f"{cal.get('date', '?')} of {model.name} ({quant.name}), {engine.name}")

    @classmethod
    def from_points(cls, points: Sequence[dict], source: str = "") -> "DecodeCorrection | None":
        """From a calibration's probe-point records (decode points only); None without any."""
        by_batch: dict[int, list[float]] = {}
        for p in points:
            if p.get("kind") == "decode" and int(p.get("decode_batch") or 0) >= 1 \
                    and (p.get("measured_s") or 0) > 0 and (p.get("predicted_s") or 0) > 0:
                by_batch.setdefault(int(p["decode_batch"]), []).append(math.log(p["measured_s"] / p["predicted_s"]))
        if not by_batch:
            return None
        batches = tuple(sorted(by_batch))
        return cls(batches, tuple(float(np.mean(by_batch[b])) for b in batches), source=source)
