"""Token counts summed over attention layers, per layer type: kappa(c) of `sim.cost.roofline`'s module
docstring. A mixin of `sim.cost.roofline.CostModel`.

The roofline prices attention FLOPs per layer-key and K/V bytes per layer-token at one figure each,
a sliding-window layer's. Where the full-attention layers have another shape (Gemma 4: 4 KV heads of
512 where the sliding layers have 16 of 256, `ModelSpec.global_n_kv_heads` / `global_head_dim`), a
full layer counts as w sliding layers in each sum: w_kv = its cached bytes per token over a sliding
layer's (the K/V read and write sums) and w_key = its attention FLOPs per key over a sliding layer's
(the key sums; `ModelSpec.full_layer_weights`). Without such a shape both are the integer 1 and
every sum is exactly the plain layer count's.

Approximations with weighted keys: the attention scores an engine without flash attention writes per
key (SCORE_BYTES x heads, no head dim) and a split-KV kernel's serial chain count a full layer's keys
w_key times; the unfused K/V re-read factor uses the sliding layers' query-head group.
"""

from __future__ import annotations

import numpy as np

from sim.catalog.models import ModelSpec


class LayerTokens:
    """`CostModel`'s layer counts and kappa sums (sets `n_layers`, `n_full_layers`, `n_sliding_layers`,
    `window`, `full_kv_layers`, `full_key_layers`, `kv_layers`)."""

    def _init_layer_counts(self, model: ModelSpec) -> None:
        # layers that attend (the token-count aggregates are over these; recurrent layers hold state)
        self.n_layers = model.n_attention_layers
        self.n_full_layers = model.n_full_attention_layers
        self.n_sliding_layers = model.n_sliding_layers
        self.window = model.sliding_window if model.n_sliding_layers else None
        # the full layers in sliding-layer units: of cached bytes (K/V reads) and of attention FLOPs (keys)
        w_kv, w_key = model.full_layer_weights
        self.full_kv_layers = self.n_full_layers * w_kv
        self.full_key_layers = self.n_full_layers * w_key
        # layers a new token's K/V is written to, in sliding-layer units (= n_layers without per-type shapes)
        self.kv_layers = self.n_sliding_layers + self.full_kv_layers

    def layer_tokens(self, context, keys: bool = False):
        """kappa(c) = L_full x w x c + L_swa x min(c, W): tokens of a c-token context that the layers hold
        (w = w_kv) or attend to (`keys`: w = w_key), summed over layers in sliding-layer units
        (= L x c without sliding-window layers). Scalars or arrays."""
        if self.window is None:
            return self.n_layers * context
        full = self.full_key_layers if keys else self.full_kv_layers
        return full * context + self.n_sliding_layers * np.minimum(context, self.window)

    def _chunk_layer_keys(self, p: float, c: float) -> float:
        """sum_{t=1}^{p} kappa(c + t) (keys): keys a causal chunk of p tokens after c cached tokens attends to."""
        full = p * c + p * (p + 1) / 2.0
        if self.window is None:
            return self.n_layers * full
        w = self.window
        top = min(c + p, w)  # positions c+1..top are below the window, the rest see exactly W keys
        below = (top * (top + 1) - c * (c + 1)) / 2.0 if top > c else 0.0
        windowed = below + (c + p - max(top, c)) * w
        return self.full_key_layers * full + self.n_sliding_layers * windowed
