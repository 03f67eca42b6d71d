"""The roofline over several devices (a `sim.cost.parallel.Placement`: tensor / pipeline parallel,
partial offload): one iteration's time, a decode run's closed form, and the breakdown. A mixin of
`sim.cost.roofline.CostModel`; the placement's physics (per-stage terms, transfers) is in
`sim.cost.parallel`."""

from __future__ import annotations

import math

import numpy as np

from sim.cost.decode_runs import _sum_pipeline_steps
from sim.cost.kernels import layer_floor_stream_s, weight_stream_s
from sim.cost.llamacpp import gemm_rows
from sim.cost.split_kv import split_kv_s


class PlacedSteps:
    """`CostModel` on a placement (uses its `_terms`, `_kernel_terms`, `placement`)."""

    # ---- several devices (a sim.cost.parallel.Placement) ---------------------------------------------
    def _microbatches(self, sequences):
        """Micro-batches an iteration is split into: min(pp, sequences), at least 1 (sim.cost.parallel)."""
        return np.minimum(self.placement.microbatches, np.maximum(sequences, 1))

    def _placed_terms(self, tokens, seqs, layer_keys, kv_read_layer_tokens, logits, batch_seqs):
        """Per part (compute_s, memory_s) of one micro-batch pass with the given aggregates, the
        pass's communication seconds, and the iteration's overheads (for `batch_seqs` sequences).

        Part p holds a fraction f of the repeating layers (and the LM head when h = 1); its weight
        GEMMs and its attention kernels each take their own roofline (`_terms`):
            gemm_p    = max((f x flops_per_token x start(T) + h x flops_per_sequence x rows(logits)) / matmul_p,
                            (f x layer weight bytes(T) + h x head bytes) / bandwidth_p)
            compute_p = gemm_p + f x attention_flops_per_layer_key x layer_keys / attention_p
            memory_p  = gemm_p + kv_factor x f x (kv_bytes_per_layer_token x (r x kv_read + L x T)
                                                  + score_bytes_per_layer_key x layer_keys) / bandwidth_p
        so the part's stage time max(compute_p, memory_p) is gemm_p + max(attention, K/V).
        `logits` = positions whose logits are computed (one per sequence; k + 1 in a verify step).
        """
        pl = self.placement
        layer_bytes = self.weight_bytes_read(tokens) - self.head_bytes
        kv_bytes = (self.kv_read_bytes_per_layer_token * kv_read_layer_tokens
                    + self.kv_bytes_per_layer_token * self.kv_layers * tokens
                    + self.state_bytes_per_sequence_step * seqs)  # hybrid models' recurrent state (0 otherwise)
        # the all-reduces inside the layers (tensor parallel), which the per-layer kernel floor bounds with
        # the GEMMs (sim.cost.parallel.Placement.layer_comm_s_per_token / _per_pass)
        # TP all-reduces priced by algorithm (sim.cost.parallel `TPAllReduce`): the same all-reduces, apart
        by_algorithm = pl.allreduce.seconds(tokens) if pl.allreduce is not None else 0.0
        layer_comm = pl.layer_comm_s_per_token * tokens + pl.layer_comm_s_per_pass + by_algorithm
        parts = []
        for p in pl.parts:
            f, h = p.layer_fraction, float(p.head)
            # the part's GEMM start-up (n_1/2 rows, `DevicePart.matmul_half_rows`; 0 = plain roofline),
            # as `_terms` prices one device: layers from two rows on, the LM head with its leftover tile
            matmul_flops = (f * (self._layer_matmul_flops(tokens, p.matmul_half_rows)
                                 + self.recurrent_flops_per_token * tokens)
                            + h * self.flops_per_sequence * gemm_rows(logits, p.matmul_half_rows))
            weight_bytes = f * layer_bytes + h * self.head_bytes
            stream_s = weight_stream_s(tokens, weight_bytes, p.bandwidth_bytes_per_s, self.matvec_weights_per_byte,
                                       p.matvec_s_per_weight)
            attention_s = f * self.attention_flops_per_layer_key * layer_keys / p.attention_flops_per_s
            if self.split_kv is not None:
                # a capped split-KV decode kernel's serial chain over the part's layers (sim.cost.split_kv), on
                # decode-only passes (one token per sequence: every key a decode key; a prompt runs another kernel)
                attention_s = attention_s + f * split_kv_s(self.split_kv, np.where(tokens <= seqs, layer_keys, 0.0), seqs)
            kv_s = p.kv_factor * f * (kv_bytes
                                      + self.score_bytes_per_layer_key * layer_keys) / p.bandwidth_bytes_per_s
            # the part's weight GEMMs, then its attention kernels, each at its own roofline (`_terms`);
            # llama.cpp's MMQ tile floor (`_mmq_tile_s`) is priced on one device only, not per part
            gemm_s = np.maximum(matmul_flops / p.matmul_flops_per_s, stream_s)
            if self.gemm_floor_s > 0:
                # the part's layers (a fraction f of them: a pipeline stage's) take at least f x the layers'
                # kernel floors summed by kind (`gemm_floor_s`: n_layers x layer_floor_s with one floor) for
                # their weight GEMMs and their all-reduces together: the floor bounds the layer's fixed kernel
                # chain, all-reduces included, so the GEMM phase is raised to f x (gemm_floor_s - the pass's
                # all-reduce seconds) at least (f x the summed floors: a stage's mix of kinds taken as the model's).
                # The attention's work over the cached keys stays on top (it grows with the context).
                # On top of it (`layer_floor_stream_s`, the engine's form): a batch's routed experts beyond one
                # token's (0 for a dense model: the grouped GEMM's extra bytes follow the chain's small kernels),
                # or with the chain + stream form the part's weight bytes at its datasheet bandwidth (a TP group's
                # is N devices' bandwidth, each streaming 1/N of the weights).
                on_top = layer_floor_stream_s(self, tokens, p.bandwidth_bytes_per_s, weight_bytes, f)
                gemm_s = np.maximum(gemm_s, f * (self.gemm_floor_s - layer_comm) + on_top)
            c, m = gemm_s + attention_s, gemm_s + kv_s
            if math.isfinite(p.upload_min_tokens):
                # op offload (sim.cost.parallel): weights copied over the link, matmuls on the GPU, then the
                # attention on the host: upload + matmul + max(attention, KV), as a (c, m) pair
                shipped = (weight_bytes * np.ceil(tokens / p.upload_chunk_tokens) / p.upload_bandwidth_bytes_per_s
                           + matmul_flops / p.upload_matmul_flops_per_s)
                big = tokens >= p.upload_min_tokens
                c, m = np.where(big, shipped + attention_s, c), np.where(big, shipped + kv_s, m)
            parts.append((c, m))
        comm = pl.comm_s_per_token * tokens + pl.comm_s_per_pass + by_algorithm
        op = pl.overhead_params or self.params
        overhead = op.iteration_overhead_s + op.per_sequence_overhead_s * batch_seqs + pl.extra_overhead_s
        return parts, comm, overhead

    def placed_time(self, tokens, sequences, layer_keys, kv_read_layer_tokens, logits=None):
        """Seconds of one iteration with these aggregates on the placement (numpy-broadcast):

            iteration_s = max(sum_p stage_p + comm, m x max_p stage_p) + overheads,
            stage_p     = max(compute_p, memory_p) = gemm_p + max(attention_p, K/V_p)  (`_placed_terms`)

        of one micro-batch (the aggregates / m, m = min(pp, sequences)): with m micro-batches in
        flight the iteration lasts one micro-batch's pass, or, when the stages are unbalanced, the
        m passes the slowest stage must make (see sim.cost.parallel). `logits` defaults to one per
        sequence. On one device (no placement) it is the single-roofline step time."""
        logits = sequences if logits is None else logits
        if self.placement is None:
            bw, mm, att, it_s, seq_s, half, _, mv = self._param_tuple()
            c, m, o = self._terms((bw, mm, att, it_s, seq_s, half, 1.0, mv), tokens, sequences, layer_keys, kv_read_layer_tokens,
                                  logits=np.asarray(logits, dtype=float))
            return np.maximum(c, m) + o
        mb = self._microbatches(sequences)
        parts, comm, overhead = self._placed_terms(
            tokens / mb, sequences / mb, layer_keys / mb, kv_read_layer_tokens / mb, logits / mb, sequences)
        stage_s = [np.maximum(c, m) for c, m in parts]
        period = sum(stage_s) + comm
        if self.placement.microbatches > 1:  # each stage handles mb micro-batches per iteration
            period = np.maximum(period, mb * np.maximum.reduce(stage_s))
        return period + overhead

    def _placed_decode_lines(self, decode_context, limit: float = math.inf):
        """Decode steps of a fixed batch on the placement: (starts, [per-part lines], constant s per
        step). Each part's compute and memory are lines in the step index on the segments of
        `_decode_aggregates`; communication and overheads are the same every step."""
        d = np.asarray(decode_context, dtype=float)
        n = len(d)
        mb = float(self._microbatches(n))
        starts, keys0, keys1, read0, read1 = self._decode_aggregates(d, limit)
        tb = n / mb
        parts0, comm, overhead = self._placed_terms(tb, tb, keys0 / mb, read0 / mb, tb, n)
        if self.graph_sizes is not None:  # CUDA graphs per rank, as on one device (`graph_extra_s`)
            overhead = overhead + self.graph_extra_s(n)
        attn, kvr, sc = self.attention_flops_per_layer_key, self.kv_read_bytes_per_layer_token, self.score_bytes_per_layer_key
        lines = [
            (c0, p.layer_fraction * (attn * keys1 / mb / p.attention_flops_per_s + split_kv_s(self.split_kv, keys1 / mb, tb)),
             m0, p.kv_factor * p.layer_fraction * (kvr * read1 + sc * keys1) / mb / p.bandwidth_bytes_per_s)
            for p, (c0, m0) in zip(self.placement.parts, parts0)
        ]
        if not isinstance(starts, float):
            lines = [tuple(np.broadcast_to(x, np.shape(starts)).astype(float) for x in line) for line in lines]
        else:
            lines = [tuple(float(x) for x in line) for line in lines]
        return starts, lines, float(comm), float(overhead), mb

    def _placed_run_time(self, placed_lines, k: int) -> float:
        """Seconds of k decode steps on the placement (exact).

        One micro-batch in flight: sum_p of each part's max-of-two-lines series + k x constant.
        Several (pp): each step is max(sum_p stage_p + comm, m x max_p stage_p), a convex
        piecewise-linear function of the step index, summed exactly by `_sum_pipeline_steps`."""
        if k <= 0:
            return 0.0
        starts, lines, comm, overhead, mb = placed_lines
        if mb <= 1:
            return sum(self._run_time((starts, *line), k) for line in lines) + k * (comm + overhead)
        if isinstance(starts, float):
            return _sum_pipeline_steps(lines, comm, mb, k) + k * overhead
        ends = np.append(starts[1:], np.inf)
        counts = np.clip(np.minimum(ends, k) - starts, 0, None)
        return sum(
            _sum_pipeline_steps([tuple(float(x[i]) for x in line) for line in lines], comm, mb, int(counts[i]))
            for i in range(len(starts)) if counts[i] > 0
        ) + k * overhead

    def _placed_breakdown(self, t, n, keys, kv_read) -> dict:
        """The placement's view of one iteration: per part (device or stage) the compute and memory
        lines of one micro-batch (`_placed_terms`: each holds the part's GEMM time, max(FLOPs,
        weights), plus its attention FLOP or K/V time; the stage takes the larger), communication,
        and the pipeline's throughput bound."""
        mb = self._microbatches(n)
        parts, comm_s, overhead_s = self._placed_terms(t / mb, n / mb, keys / mb, kv_read / mb, n / mb, n)
        stage_s = [float(max(c, m)) for c, m in parts]
        slowest = int(np.argmax(stage_s))
        c_slow, m_slow = parts[slowest]
        return {
            "compute_s": float(sum(c for c, _ in parts)),
            "memory_s": float(sum(m for _, m in parts)),
            "overhead_s": float(overhead_s),
            "comm_s": float(comm_s),
            "step_s": float(self.placed_time(t, n, keys, kv_read)),
            "bound": "compute" if c_slow > m_slow else "memory",
            "microbatches": mb,
            "parts": [{"name": p.name, "compute_s": float(c), "memory_s": float(m)}
                      for p, (c, m) in zip(self.placement.parts, parts)],
            # each stage handles `mb` micro-batches per iteration: the slowest one bounds throughput
            "pipeline_bottleneck_s": float(mb * max(stage_s)),
        }
