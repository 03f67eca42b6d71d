"""A fixed-prompt dataset's requests share their whole prompt (sim.bench.corpus `shared_prefix`, which
calibrate/serving/rows.py reads): the load point says so, the replay hands it to the simulator's prefix cache, and
every other point keeps the replay cache key it had before the field existed."""
from __future__ import annotations

import hashlib
import json

import pytest

from calibrate.serving.replay import replay
from calibrate.serving.rows import curves, load_corpus, load_points, shared_prefix


@pytest.fixture(scope="module")
def corpus_curves():
    return curves(load_corpus())


def _old_key(p) -> str:
    """LoadPoint.key as it was before `shared_prefix_tokens` (session 48)."""
    blob = json.dumps([p.curve_id, p.engine, p.model, p.quant, p.tp, p.kv_dtype, sorted(p.overrides.items()),
                       p.load_kind, p.load, p.prompt_lens, p.output_lens, p.release_s, p.max_concurrency], default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def test_only_a_fixed_prompt_dataset_shares_its_prompt():
    assert shared_prefix({"dataset": "fixed-prompt"}, [60, 60]) == 60
    assert shared_prefix({"dataset": "random"}, [60, 60]) == 0
    assert shared_prefix({"dataset": "sharegpt"}, [60, 60]) == 0


def test_points_without_a_shared_prefix_keep_their_keys(corpus_curves):
    ids = [c for c, rows in corpus_curves.items() if (rows[0].get("dataset") or "").strip().lower() == "random"][:5]
    assert ids
    for cid in ids:
        for p in load_points(corpus_curves[cid]):
            assert p.shared_prefix_tokens == 0
            assert p.key() == _old_key(p)


def test_a_fixed_prompt_curve_is_prefix_cached_in_its_replay(corpus_curves):
    cid = next(c for c in corpus_curves if c.startswith("corpus_f-azir") and "vllm" in c and "nvfp4" in c)
    p = next(p for p in load_points(corpus_curves[cid]) if p.load == 16)
    assert p.shared_prefix_tokens == p.prompt_lens[0] == 60
    assert p.key() != _old_key(p)
    p0 = next(q for q in load_points(corpus_curves[cid]) if q.load == 16)
    p0.shared_prefix_tokens = 0
    no_front = {"request_overhead_ms": 0.0, "front_request_ms": 0.0}  # the prefill's share of TTFT, no front end
    cached, fresh = replay(p, no_front)["ttft_ms|median"], replay(p0, no_front)["ttft_ms|median"]
    # 16 prompts of 60 tokens sent at once each round: with vLLM's 16-token blocks 48 of each prompt's tokens
    # are reused after the first round, so the round's prefill is a quarter of the tokens
    assert cached < 0.8 * fresh
