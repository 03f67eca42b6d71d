"""How llama.cpp cuts one batch into passes over the weights when every sequence has its own KV stream.

With `kv_unified` off (llama-server with an explicit `-np N`, the `--local` driver, the calibration's
probe contexts) the KV cache keeps one stream per sequence, and `llama_kv_cache::init_batch` splits
a `llama_batch` with `llama_batch_allocr::split_equal(n_ubatch, sequential=true)`
(src/llama-batch.cpp). Each call builds one ubatch — one forward pass over every weight matrix:

1. walk the batch in order and take the next unfinished sequence if it is the first taken or its
   seq_id is the last taken id + 1 (only *consecutive* seq_ids share a ubatch);
2. take the same number k of tokens from each: as many as the sequence with the fewest left
   still has, and no more than n_ubatch / (sequences taken), at least 1;
3. repeat until every token is used.

So a batch of decodes in slots 0, 1 and 2 plus a prompt in slot 3 is *not* "a decode pass and a
prompt pass": the first pass takes one token from each of the four (the prompt's first token
rides with the decodes, without logits), the second the prompt's other tokens. Decodes in slots
0 and 2 are two passes, as are two prompts in slots 3 and 5. Which rows a pass has decides its
price on a CPU, where llama.cpp's matmul kernels change at 2 and at 4 rows (`sim.cost.gemm_rows`):
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

from collections.abc import Sequence
from dataclasses import dataclass


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
