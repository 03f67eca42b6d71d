"""Decode attention whose keys are split over a capped number of thread blocks: the serial chain of SGLang's
triton decode kernel at small batch (issue 38; docs/floor-structure.md 'The context slope').

SGLang's triton attention backend (`--attention-backend triton`) decodes with the LightLLM-derived two-stage
kernel: stage 1 launches a grid of (batch, head blocks, num_kv_splits) programs, each of which walks its share
of one sequence's keys in a serial loop of BLOCK_N-key tiles (sgl-project/sglang
python/sglang/srt/layers/attention/triton_ops/decode_attention.py at 03cd2ec, `_fwd_grouped_kernel_stage1` /
`_decode_grouped_att_m_fwd`: grid = (batch, cdiv(head_num, min(BLOCK_H = 16, kv_group_num)), MAX_KV_SPLITS);
`_fwd_kernel_stage1` with grid (batch, head_num, MAX_KV_SPLITS) when kv_group_num is 1); stage 2 merges the
splits. The split count per sequence is chosen on the GPU (triton_ops/metadata.py `get_num_kv_splits_triton`,
sglang@bdd1bcd) and capped at `max_kv_splits` = `--triton-attention-num-kv-splits`, default 8 (server_args.py
`triton_attention_num_kv_splits: int = 8`); for one sequence the rule gives the cap (its first term is 1, its
second min(cdiv(SMs x log2(len / 64), head blocks), 8) = 8 on any datacenter GPU). At batch 1 the grid is a few
dozen programs on a GPU of 132-148 SMs, so a layer's attention lasts one program's loop: c / S keys at tau
seconds each, growing with the context c where a split-KV kernel that fills the GPU stays on its K/V bandwidth
(sim.cost.roofline `kv_s`). Later SGLang lifted the cap for MLA (PR #20479: triton_backend.py
`_mla_decode_kv_splits_cap`, up to next_power_of_2(SM count), sglang@0085842) and proposed it for the other
layers (PR #21775); releases before run the capped kernel (the corpus's triton rows: SGLang 0.5.7).

tau (`TAU_S_PER_KEY`) is not fitted to the serving corpus: it is read off the one published batch-1 sweep of
the capped kernel, sgl-project/sglang PR #21775 (https://github.com/sgl-project/sglang/pull/21775, "Old
Triton" column, Qwen/Qwen3-8B on H100, decode throughput at input length L): 141.37 tok/s at L = 1000 and
48.35 tok/s at L = 32000, i.e. 1/48.35 - 1/141.37 = 20.683 - 7.074 = 13.609 ms more per step over 31,000 more
keys = 0.4390 us per key per step; over Qwen3-8B's 36 layers 12.19 ns per key and layer; one program walks
1/8 of the keys, so tau = 8 x 12.19 = 97.6 ns per key (the L = 1000 -> 8000 pair gives 0.4379 us, the same
line). Qwen3-8B's grouped kernel walks 128-wide keys for 4 query heads; an MLA layer's program walks 576-wide
latent keys for up to 16 heads: the same tau per key is the reading of the loop as latency-bound (one
dependent tile load per BLOCK_N keys), a lower bound where the wider tiles' bytes also count.

The term is added to the attention kernels' FLOP time (`CostModel._kernel_terms`, `PlacedSteps._placed_terms`):
at batch 1 that throughput time is under 1% of it. Its scope is the small batch: with more programs than the
GPU runs at once, the programs queue (the chain is priced once per step here, a lower bound at large batch)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: seconds per key of one program's serial loop (module docstring: PR #21775's "Old Triton" column, H100)
TAU_S_PER_KEY = 97.6e-9
#: query heads one grouped-kernel program serves (decode_attention.py `BLOCK_H = 16`)
BLOCK_H = 16


@dataclass(frozen=True)
class SplitKV:
    """A decode attention kernel that splits each sequence's keys over at most `splits` programs per head
    block (`head_blocks` programs per split and sequence, on one device), each walking its keys serially."""

    splits: int
    head_blocks: int
    tau_s: float = TAU_S_PER_KEY

    @classmethod
    def for_engine(cls, eng, spec) -> "SplitKV | None":
        """The engine's capped split-KV decode (EngineConfig.decode_kv_splits; None = none) for model `spec`
        at the engine's tensor-parallel degree: head blocks as the triton backend's grid has them."""
        splits = getattr(eng, "decode_kv_splits", None)
        if not splits:
            return None
        tp = max(1, int(getattr(eng, "tp", 1) or 1))
        heads = max(1, spec.n_heads // tp)
        group = heads if spec.mla is not None else max(1, spec.n_heads // spec.n_kv_heads)
        blocks = heads if group == 1 else math.ceil(heads / min(BLOCK_H, group))
        return cls(splits=int(splits), head_blocks=int(blocks))

    def seconds(self, decode_layer_keys, seqs):
        """One step's serial chain over the attention layers: the keys one sequence attends to summed over
        layers (`decode_layer_keys` / seqs, the batch's mean) / splits x tau (numpy-broadcast)."""
        return np.asarray(decode_layer_keys) / np.maximum(seqs, 1.0) / self.splits * self.tau_s


def split_kv_s(split_kv: SplitKV | None, decode_layer_keys, seqs):
    """`split_kv.seconds(...)`, 0.0 without a capped split-KV kernel (the engine's default)."""
    if split_kv is None:
        return 0.0
    s = split_kv.seconds(decode_layer_keys, seqs)
    return float(s) if np.ndim(s) == 0 else s
