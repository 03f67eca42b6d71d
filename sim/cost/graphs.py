"""CUDA graphs (`EngineConfig.cuda_graph_sizes`): what a decode-only step costs beyond its own rows
when the engine replays a graph captured for a larger batch, or runs eagerly. A mixin of
`sim.cost.roofline.CostModel`."""

from __future__ import annotations

import bisect


class CudaGraphs:
    """`CostModel` with `graph_sizes` (uses its `graph_sizes`, `graph_padding`, `eager_overhead_s`,
    `_kernel_terms`, `_param_tuple`, `params` and the `_graph_extra` cache)."""

    def graph_extra_s(self, n: int) -> float:
        """Seconds a decode-only step of n sequences costs beyond its own rows because of CUDA graphs
        (`graph_sizes`, EngineConfig.cuda_graph_sizes): the step replays the graph captured for the
        next size up, g >= n, whose weight GEMMs run g rows (the padding rows are computed and
        dropped: vLLM's pad_for_cudagraph, SGLang's cuda_graph_runner), so it adds
        max(matmul, weights)(g rows) - the same for n rows, logits only for the n real rows; above
        the largest captured size the step runs eagerly and pays `eager_overhead_s` of kernel
        launches, as does a step between captured sizes when padding is off (`graph_padding`:
        TensorRT-LLM replays only exact sizes). 0 without graphs modelled. Cached per n and parameter set.

        On several devices (a tensor- or pipeline-parallel `placement`) every rank captures and replays
        its own graph of its shard for the same batch sizes (vLLM's CUDAGraphWrapper and
        TensorRT-LLM's CUDAGraphRunner run per worker rank; TensorRT-LLM 1.0 llm_args.py
        CudaGraphConfig: one batch-size list for the whole model), so the same rule applies: the eager
        launch cost once per step (the ranks launch in parallel), and the padding rows' cost is the
        placement's own step of g rows minus that of n (`_placed_pad_extra_s`: each rank's GEMM shard
        and the all-reduces over g rows)."""
        if self.graph_sizes is None or n <= 0:
            return 0.0
        hit = self._graph_extra.get(n)
        if hit is not None and hit[1] is self.params:
            return hit[0]
        i = bisect.bisect_left(self.graph_sizes, n)
        if i == len(self.graph_sizes) or (not self.graph_padding and self.graph_sizes[i] != n):
            extra = self.eager_overhead_s
        elif self.graph_sizes[i] == n:
            extra = 0.0
        else:
            if self.placement is not None:
                extra = self._placed_pad_extra_s(n, self.graph_sizes[i])
                self._graph_extra[n] = (extra, self.params)
                return extra
            p = self._param_tuple()
            m_n, w_n, *_ = self._kernel_terms(p, n, n, 0.0, 0.0)
            m_g, w_g, *_ = self._kernel_terms(p, self.graph_sizes[i], n, 0.0, 0.0)
            extra = max(0.0, max(float(m_g), float(w_g)) - max(float(m_n), float(w_n)))
        self._graph_extra[n] = (extra, self.params)
        return extra

    def _placed_pad_extra_s(self, n: int, g: int) -> float:
        """Seconds a decode step of n sequences on the placement costs beyond its own rows when it
        replays the graph captured for g > n rows: the padded pass's weight GEMMs (each part's shard)
        and all-reduces over g rows minus those over n, logits for the n real rows, no attention work
        (the padding rows attend to nothing), the iteration overheads for n sequences in both."""
        def pass_s(rows: int) -> float:
            mb = float(self._microbatches(n))
            parts, comm, _ = self._placed_terms(rows / mb, rows / mb, 0.0, 0.0, n / mb, n)
            stage = [float(max(c, m)) for c, m in parts]
            period = sum(stage) + float(comm)
            if self.placement.microbatches > 1:
                period = max(period, mb * max(stage))
            return period

        return max(0.0, pass_s(g) - pass_s(n))
