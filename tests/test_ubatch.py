"""`sim.cost.llamacpp.split_equal` and `split_simple` against hand-worked batches, their invariants, and
llama.cpp itself.

The last two tests run real llama.cpp on the tiny GGUF with LLAMA_BATCH_DEBUG=1, which makes
`llama_batch_allocr` log every ubatch it cuts (its seq ids and tokens per sequence), and checks
that the simulator predicts exactly those passes for random batches of decodes and prompt chunks.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_model import requires_llama_cpp, tiny_gguf  # noqa: F401 - fixture

from sim.cost.llamacpp import Pass, Piece, split_equal, split_simple


def shape(passes: list[Pass]) -> list[tuple[int, int, int]]:
    """(sequences, tokens per sequence, outputs) of each pass."""
    return [(len(p.contexts), p.tokens_per_seq, p.outputs) for p in passes]


def test_decodes_in_consecutive_slots_are_one_pass():
    assert shape(split_equal([Piece(s, 1, 100) for s in range(4)])) == [(4, 1, 4)]


def test_a_gap_between_slots_starts_a_new_pass():
    passes = split_equal([Piece(0, 1, 10), Piece(2, 1, 20), Piece(3, 1, 30)])
    assert shape(passes) == [(1, 1, 1), (2, 1, 2)]
    assert passes[1].contexts == (20, 30)


def test_a_prompt_in_the_next_slot_puts_its_first_token_into_the_decode_pass():
    passes = split_equal([Piece(0, 1, 200), Piece(1, 128, 0)])
    assert shape(passes) == [(2, 1, 1), (1, 127, 1)]
    assert passes[0].seqs == (0, 1) and passes[0].contexts == (200, 0) and passes[1].contexts == (1,)


def test_a_prompt_in_an_earlier_slot_is_a_pass_of_its_own():
    assert shape(split_equal([Piece(1, 1, 200), Piece(0, 128, 0)])) == [(1, 1, 1), (1, 128, 1)]


def test_a_prompt_fills_the_gap_of_a_broken_run():
    # decodes in slots 0 and 2, a prompt in slot 1: {0, 1's first token}, {2}, then the rest of 1
    passes = split_equal([Piece(0, 1, 5), Piece(2, 1, 5), Piece(1, 20, 5)])
    assert shape(passes) == [(2, 1, 1), (1, 1, 1), (1, 19, 1)]


def test_consecutive_prompts_share_passes_up_to_the_shorter_one():
    passes = split_equal([Piece(3, 100, 0), Piece(4, 300, 0, output=False)])
    assert shape(passes) == [(2, 100, 1), (1, 200, 0)]
    assert passes[1].contexts == (100,)


def test_n_ubatch_caps_tokens_per_pass():
    assert shape(split_equal([Piece(0, 1200, 0)], n_ubatch=512)) == [(1, 512, 0), (1, 512, 0), (1, 176, 1)]
    # two sequences: at most 512 // 2 tokens each per pass
    assert shape(split_equal([Piece(0, 300, 0), Piece(1, 300, 0)], n_ubatch=512)) == [(2, 256, 0), (2, 44, 2)]


def test_one_kv_stream_cuts_the_batch_in_order_n_ubatch_tokens_at_a_time():
    # two decodes, then a 150-token prompt, 64 tokens per pass: the decodes ride with the prompt's start
    passes = split_simple([Piece(0, 1, 10), Piece(1, 1, 20), Piece(2, 150, 0)], 64)
    assert [[(p.seq, p.tokens, p.context, p.output) for p in ps] for ps in passes] == [
        [(0, 1, 10, True), (1, 1, 20, True), (2, 62, 0, False)],
        [(2, 64, 62, False)],
        [(2, 24, 126, True)],
    ]


@settings(deadline=None, max_examples=100)
@given(st.lists(st.tuples(st.integers(1, 300), st.integers(0, 500), st.booleans()), min_size=1, max_size=8),
       st.integers(1, 256))
def test_simple_passes_keep_every_token_once_in_order(items, n_ubatch):
    pieces = [Piece(s, n, c, o) for s, (n, c, o) in enumerate(items)]
    passes = split_simple(pieces, n_ubatch)
    assert all(sum(p.tokens for p in ps) == n_ubatch for ps in passes[:-1])
    assert 0 < sum(p.tokens for p in passes[-1]) <= n_ubatch
    flat = [p for ps in passes for p in ps]
    for s, pc in enumerate(pieces):
        mine = [p for p in flat if p.seq == s]
        assert sum(p.tokens for p in mine) == pc.tokens
        assert [p.context for p in mine] == [pc.context + sum(q.tokens for q in mine[:i]) for i in range(len(mine))]
        assert [p.output for p in mine] == [False] * (len(mine) - 1) + [pc.output]


def test_more_sequences_than_n_ubatch_take_n_ubatch_plus_one_per_pass():
    # llama_batch_allocr::split_equal stops adding sequences once it holds more than n_ubatch
    assert shape(split_equal([Piece(s, 1, 10) for s in range(10)], 4)) == [(5, 1, 5), (5, 1, 5)]


def test_bad_pieces_are_refused():
    with pytest.raises(ValueError):
        split_equal([Piece(0, 1, 0), Piece(0, 1, 0)])
    with pytest.raises(ValueError):
        split_equal([Piece(0, 0, 0)])


pieces_strategy = st.lists(
    st.tuples(st.integers(1, 40), st.booleans()), min_size=1, max_size=10,
).flatmap(lambda sizes: st.permutations(range(len(sizes))).map(
    lambda seqs: [Piece(s, n, 7 * s, out) for s, (n, out) in zip(seqs, sizes)]))


@settings(max_examples=200, deadline=None)
@given(pieces=pieces_strategy, n_ubatch=st.one_of(st.none(), st.integers(1, 64)))
def test_every_token_is_in_exactly_one_pass_of_consecutive_sequences(pieces, n_ubatch):
    passes = split_equal(pieces, n_ubatch)
    piece = {pc.seq: pc for pc in pieces}
    taken = dict.fromkeys(piece, 0)
    for p in passes:
        assert list(p.seqs) == list(range(p.seqs[0], p.seqs[0] + len(p.seqs)))  # consecutive ids
        if n_ubatch:
            assert p.tokens <= max(n_ubatch, len(p.seqs))
        for s, c in zip(p.seqs, p.contexts):
            assert c == piece[s].context + taken[s]  # a sequence's tokens in order, none skipped
            taken[s] += p.tokens_per_seq
    assert taken == {s: pc.tokens for s, pc in piece.items()}
    assert sum(p.outputs for p in passes) == sum(pc.output for pc in pieces)


_CHILD = r"""
import ctypes, json, os, sys
os.environ["LLAMA_BATCH_DEBUG"] = "1"  # read when the context is created
import llama_cpp as L
plan = json.loads(sys.stdin.read())
lines = []
cb = L.llama_log_callback(lambda level, text, ud: lines.append(text.decode(errors="replace")))
L.llama_log_set(cb, ctypes.c_void_p(0))
L.llama_backend_init()
mp = L.llama_model_default_params()
model = L.llama_model_load_from_file(plan["model"].encode(), mp)
cp = L.llama_context_default_params()
cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = plan["n_ctx"], plan["n_batch"], plan["n_ubatch"], plan["n_seq"]
cp.kv_unified = plan.get("unified", False)
cp.n_threads = cp.n_threads_batch = 1
ctx = L.llama_init_from_model(model, cp)
mem = L.llama_get_memory(ctx)
batch = L.llama_batch_init(plan["n_batch"], 0, 1)
out = []
for pieces in plan["batches"]:
    L.llama_memory_clear(mem, True)
    for seq, n, c, _ in pieces:  # fill each sequence's context first (one sequence per call)
        for start in range(0, c, plan["n_batch"]):
            k = min(plan["n_batch"], c - start)
            batch.n_tokens = k
            for j in range(k):
                batch.token[j] = 1 + (start + j) % 500; batch.pos[j] = start + j
                batch.n_seq_id[j] = 1; batch.seq_id[j][0] = seq; batch.logits[j] = False
            assert L.llama_decode(ctx, batch) == 0
    i = 0
    for seq, n, c, output in pieces:
        for j in range(n):
            batch.token[i] = 1 + j % 500; batch.pos[i] = c + j; batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq; batch.logits[i] = bool(output) and j == n - 1; i += 1
    batch.n_tokens = i
    lines.clear()
    assert L.llama_decode(ctx, batch) == 0
    ubatches, cur = [], None
    for line in lines:  # ubatch_print after "added ubatch N to split"
        if "added ubatch" in line:
            cur = {}
            ubatches.append(cur)
        elif cur is not None and "n_seq_tokens" in line:
            cur["k"] = int(line.split("=")[1])
        elif cur is not None and "n_tokens" in line:
            cur["tokens"] = int(line.split("=")[1])
        elif cur is not None and "seq_id_unq" in line:
            cur["seqs"] = [int(x) for x in line.split("[")[1].split("]")[0].split()]
    out.append(ubatches)
print(json.dumps(out))
"""


def _random_batches(rng, n_seq: int, n_batch: int, count: int, max_prompts: int, max_prompt_context: int,
                    random_outputs: bool) -> list[list[tuple]]:
    """`count` batches of (seq, tokens, context, output): decodes of a random subset of the slots in
    slot order, then up to `max_prompts` prompt chunks in random slots, at most `n_batch` tokens in
    all. A chunk's logits are random when `random_outputs`, else on."""
    batches = []
    for _ in range(count):
        seqs = rng.permutation(n_seq)[: rng.integers(1, n_seq + 1)]
        n_prompts = int(rng.integers(0, min(max_prompts, len(seqs)) + 1))
        decodes = sorted(int(s) for s in seqs[n_prompts:])  # decodes in slot order, prompts after
        pieces = [(s, 1, int(rng.integers(1, 60)), True) for s in decodes]
        budget = n_batch - len(pieces)
        for s in seqs[:n_prompts]:
            n = int(rng.integers(1, max(2, budget // n_prompts)))
            context = int(rng.integers(0, max_prompt_context))
            pieces.append((int(s), n, context, bool(rng.integers(0, 2)) if random_outputs else True))
            budget -= n
        batches.append(pieces)
    return batches


def _llama_cpp_ubatches(plan: dict) -> list[list[dict]]:
    """The ubatches real llama.cpp cuts each of the plan's batches into (`_CHILD`, in a child process)."""
    proc = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(plan), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    measured = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(measured), "llama.cpp logged no ubatch: LLAMA_BATCH_DEBUG not honoured"
    return measured


@requires_llama_cpp
def test_llama_cpp_cuts_batches_into_the_predicted_passes(tiny_gguf):
    n_seq, n_batch = 8, 256
    batches = _random_batches(np.random.default_rng(0), n_seq, n_batch, 30, max_prompts=3, max_prompt_context=40,
                              random_outputs=True)
    plan = {"model": str(tiny_gguf), "n_ctx": n_seq * 256, "n_batch": n_batch, "n_ubatch": n_batch,
            "n_seq": n_seq, "batches": batches}
    for pieces, real in zip(batches, _llama_cpp_ubatches(plan)):
        predicted = split_equal([Piece(s, n, c, o) for s, n, c, o in pieces], n_batch)
        assert [(list(p.seqs), p.tokens_per_seq) for p in predicted] == [(r["seqs"], r["k"]) for r in real], pieces


@requires_llama_cpp
def test_llama_cpp_cuts_a_unified_batch_into_the_predicted_simple_passes(tiny_gguf):
    """One KV stream (llama-server's default --kv-unified) and n_ubatch below n_batch: llama.cpp's
    ubatches are `split_simple`'s passes (tokens, and the sequences in each)."""
    n_seq, n_batch, n_ubatch = 6, 256, 48
    batches = _random_batches(np.random.default_rng(1), n_seq, n_batch, 20, max_prompts=2, max_prompt_context=30,
                              random_outputs=False)
    plan = {"model": str(tiny_gguf), "n_ctx": n_seq * 256, "n_batch": n_batch, "n_ubatch": n_ubatch,
            "n_seq": n_seq, "unified": True, "batches": batches}
    for pieces, real in zip(batches, _llama_cpp_ubatches(plan)):
        predicted = split_simple([Piece(s, n, c, o) for s, n, c, o in pieces], n_ubatch)
        assert [(sum(p.tokens for p in ps), sorted({p.seq for p in ps})) for ps in predicted] == \
            [(r["tokens"], sorted(r["seqs"])) for r in real], pieces


@requires_llama_cpp
def test_llama_cpp_caps_a_pass_at_n_ubatch_plus_one_sequences(tiny_gguf):
    """Eight decodes in consecutive slots with n_ubatch 4, one KV stream per sequence: llama.cpp's
    ubatches hold 5 and 3 sequences, as `split_equal` predicts."""
    pieces = [(s, 1, 5 + s, True) for s in range(8)]
    plan = {"model": str(tiny_gguf), "n_ctx": 8 * 256, "n_batch": 64, "n_ubatch": 4, "n_seq": 8,
            "batches": [pieces]}
    real = _llama_cpp_ubatches(plan)[0]
    predicted = split_equal([Piece(s, n, c, o) for s, n, c, o in pieces], 4)
    assert [(list(p.seqs), p.tokens_per_seq) for p in predicted] == [(r["seqs"], r["k"]) for r in real]
    assert [len(p.seqs) for p in predicted] == [5, 3]
