"""Attention over padded KV views (`EngineConfig.attention_kv_padding`: llama.cpp's n_kv): a pass
spans the cells in use rounded up to a multiple of the padding, masked cells computed. A mixin of
`sim.cost.roofline.CostModel`."""

from __future__ import annotations

import math

import numpy as np



class PaddedViews:
    """`CostModel` with `kv_pad` > 0 (uses its `kv_pad`, `window`, layer counts)."""

    def padded_kv(self, used):
        """n_kv: the KV cells a pass's attention spans when the engine pads its KV views
        (`kv_pad` > 0): the highest cell in use after the pass (`used`: the longest sequence's
        context plus its new tokens), rounded up to a multiple of kv_pad, at least kv_pad.
        llama.cpp (src/llama-kv-cache.cpp `get_n_kv`: n_pad_cur = max(n_pad, 256), the maximum
        over the streams in the ubatch) builds K, V and the mask as views of n_kv cells and
        computes every masked cell, so a pass's attention costs rows x n_kv, not the causal
        sum. Measured on Gemma 3 270M Q4_K_M, 1 thread: a 256-token prompt 544 ms, 257 tokens
        601 ms; over 200-512 tokens time = 1.91 ms x P + 0.84 us x P x n_kv (within 4 %), where
        the causal sum missed 257 tokens by 9 %. Scalars or arrays."""
        pad = self.kv_pad
        return np.maximum(pad, np.ceil(np.asarray(used, dtype=float) / pad) * pad)

    def steps_in_kv_block(self, decode_context) -> int | None:
        """Decode steps a fixed batch takes before its padded KV view grows to the next block
        (`padded_kv`; at least 1), None without padding. Within them every step costs the same,
        which the simulator's fast-forward and its per-step gaps rely on."""
        if not self.kv_pad or not len(decode_context):
            return None
        top = float(np.max(decode_context)) + 1.0  # cells used after the first step
        return int(self.padded_kv(top) - top) + 1

    def _padded_layer_cells(self, n_kv, rows_per_seq, keys: bool = False):
        """Cells summed over layers one row attends to (`keys`) or reads with a padded view of n_kv
        cells: full layers all n_kv (weighted by layer type, sim.cost.layer_tokens); sliding-window
        layers at most the window plus the pass's own rows, padded (llama.cpp keeps them in a
        separate, smaller cache: an approximation there)."""
        if self.window is None:
            return self.n_layers * n_kv
        swa = np.minimum(n_kv, self.padded_kv(self.window + rows_per_seq))
        return (self.full_key_layers if keys else self.full_kv_layers) * n_kv + self.n_sliding_layers * swa

    def _padded_aggregate(self, prefill_tokens, prefill_context, decode_context, outputs):
        """`_aggregate` with padded KV views (`padded_kv`): the batch is one pass, every row
        attends to the n_kv cells of its longest sequence, and every sequence's view of n_kv
        cells is read."""
        d = np.asarray(decode_context, dtype=float)
        used = [c + p for p, c in zip(prefill_tokens, prefill_context)] + list(d + 1)
        if not used:
            return 0.0, 0.0 if outputs is None else float(outputs), 0.0, 0.0, 0.0
        n_kv = float(self.padded_kv(max(used)))
        chunk_rows = float(sum(prefill_tokens))
        n_seqs = len(prefill_tokens) + len(d)
        per_row = float(self._padded_layer_cells(n_kv, max(prefill_tokens, default=1), keys=True))
        read = float(self._padded_layer_cells(n_kv, max(prefill_tokens, default=1)))
        decode_keys = len(d) * per_row
        keys = chunk_rows * per_row + decode_keys
        seqs = float(n_seqs if outputs is None else outputs)
        return chunk_rows + len(d), seqs, keys, n_seqs * read, decode_keys

    def _padded_decode_aggregates(self, d: np.ndarray, limit: float):
        """`_decode_aggregates` with padded KV views: step i spans n_kv(max D + i + 1) cells for
        every sequence (keys and reads), constant between the steps where the longest sequence
        crosses a multiple of kv_pad — one segment each, with zero slope. Without a step limit
        the segments stop at the model's context."""
        n = len(d)
        top = float(d.max()) + 1.0  # cells used after step 0
        pad = self.kv_pad
        horizon = limit if math.isfinite(limit) else max(float(self.model.max_context) - top, 1.0)
        first = self.padded_kv(top)
        # step i crosses into the next block when top + i = first + j x pad + 1
        starts = np.concatenate([[0.0], first + pad * np.arange(0, max(0, math.ceil((horizon - (first - top)) / pad)))
                                 - top + 1.0])
        starts = starts[(starts == 0) | ((starts > 0) & (starts < horizon))]
        cells = n * self._padded_layer_cells(self.padded_kv(top + starts), 1, keys=True)
        read = n * self._padded_layer_cells(self.padded_kv(top + starts), 1)
        zeros = np.zeros_like(cells)
        if len(starts) == 1:
            return 0.0, float(cells[0]), 0.0, float(read[0]), 0.0
        return starts, cells, zeros, read, zeros
