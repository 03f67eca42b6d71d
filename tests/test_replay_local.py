"""The in-process llama.cpp continuous-batching driver on a tiny random-weight model."""

from __future__ import annotations

import pytest
from tiny_model import requires_llama_cpp, tiny_gguf  # noqa: F401 - fixture

from calibrate.replay.local import LocalConfig, replay_local
from calibrate.replay.records import COMPLETED, FAILED, REJECTED, REQUEST_COLUMNS
from workloads.request import Request

pytestmark = requires_llama_cpp


def _reqs(n, *, prompt=40, out=12, gap_s=0.0):
    return [Request(id=f"r{i}", arrival_s=i * gap_s, prompt_tokens=prompt + 5 * i, output_tokens=out + i,
                    max_tokens=out + i) for i in range(n)]


def assert_complete_and_causal(result, requests):
    by_id = {r.id: r for r in result.records}
    assert set(by_id) == {r.id for r in requests}
    for req in requests:
        rec = by_id[req.id]
        assert rec.status == COMPLETED, rec.reason
        assert rec.output_tokens == req.output_tokens == len(rec.token_times_s)
        assert rec.prompt_tokens == req.prompt_tokens
        times = rec.token_times_s
        assert all(a <= b for a, b in zip(times, times[1:]))
        assert rec.arrival_s <= (rec.scheduled_s if rec.scheduled_s is not None else rec.arrival_s) <= times[0]
        assert times[-1] == rec.finish_s


def test_local_driver_serves_two_closed_loop_clients_with_complete_causal_records(tiny_gguf):
    reqs = _reqs(6)
    res = replay_local(reqs, tiny_gguf, concurrency=2, cfg=LocalConfig(n_seq_max=2, n_ctx_per_seq=256, n_threads=1))
    assert_complete_and_causal(res, reqs)
    assert list(res.requests.columns) == list(REQUEST_COLUMNS)
    s = res.summary
    assert s["requests"] == {"total": 6, "completed": 6, "rejected": 0, "failed": 0}
    assert s["throughput"]["output_tok_s"] > 0 and s["ttft_s"]["p50"] > 0
    # closed loop: the 3rd request is sent when one of the first two finishes
    first_two_finish = sorted(r.finish_s for r in res.records[:2])
    assert res.records[2].arrival_s == pytest.approx(first_two_finish[0])


def test_local_driver_puts_several_sequences_in_one_batch(tiny_gguf):
    reqs = _reqs(8, out=20)
    res = replay_local(reqs, tiny_gguf, concurrency=4, cfg=LocalConfig(n_seq_max=4, n_ctx_per_seq=256, n_threads=1))
    assert_complete_and_causal(res, reqs)
    assert res.summary["batch_size"]["max"] == 4
    assert res.engine_stats["kv_capacity_tokens"] == 4 * 256
    # continuous batching: a request is admitted while others are mid-decode
    overlaps = sum(1 for a in res.records for b in res.records
                   if a.id != b.id and a.scheduled_s < b.finish_s and b.token_times_s[0] < a.scheduled_s)
    assert overlaps > 0


def test_local_driver_rejects_a_request_longer_than_the_slot_context_and_serves_the_rest(tiny_gguf):
    reqs = [Request(id="fits", arrival_s=0.0, prompt_tokens=30, output_tokens=10, max_tokens=10),
            Request(id="too-long", arrival_s=0.0, prompt_tokens=300, output_tokens=10, max_tokens=10)]
    res = replay_local(reqs, tiny_gguf, concurrency=1, cfg=LocalConfig(n_seq_max=1, n_ctx_per_seq=256, n_threads=1))
    by_id = {r.id: r for r in res.records}
    assert by_id["fits"].status == COMPLETED
    assert by_id["too-long"].status == REJECTED
    assert "310" in by_id["too-long"].reason and "256" in by_id["too-long"].reason


def test_local_driver_open_loop_sends_each_request_at_its_arrival(tiny_gguf):
    reqs = [Request(id="a", arrival_s=5.0, prompt_tokens=20, output_tokens=4, max_tokens=4),
            Request(id="b", arrival_s=5.3, prompt_tokens=20, output_tokens=4, max_tokens=4)]
    res = replay_local(reqs, tiny_gguf, cfg=LocalConfig(n_seq_max=2, n_ctx_per_seq=256, n_threads=1))
    by_id = {r.id: r for r in res.records}
    assert by_id["a"].arrival_s == 5.0 and by_id["b"].arrival_s == 5.3  # the trace's clock
    assert by_id["b"].scheduled_s >= 5.3


def test_local_driver_timeout_keeps_the_tokens_already_measured(tiny_gguf):
    reqs = _reqs(8, prompt=100, out=1900)
    res = replay_local(reqs, tiny_gguf, concurrency=2,
                       cfg=LocalConfig(n_seq_max=2, n_ctx_per_seq=2048, n_threads=1), timeout_s=0.2)
    assert res.error.startswith("timeout")
    failed = [r for r in res.records if r.status == FAILED]
    assert failed and any(len(r.token_times_s) > 0 for r in failed)
    assert {r.id for r in res.records} == {r.id for r in reqs}  # never-sent requests are listed too


def test_local_driver_logs_every_iteration_and_writes_it(tiny_gguf, tmp_path):
    import pandas as pd

    reqs = _reqs(8, out=20)
    res = replay_local(reqs, tiny_gguf, concurrency=4, cfg=LocalConfig(n_seq_max=4, n_ctx_per_seq=256, n_threads=1))
    log = pd.DataFrame(res.engine_stats["iteration_log"])
    assert len(log) == res.engine_stats["iterations"] == len(res.engine_stats["batch_sizes"])
    # every token came out of one logged iteration: decodes 1 each, a finished prompt its first token
    tokens = sum(r.output_tokens for r in res.records)
    assert log["decode_seqs"].sum() + sum(1 for r in res.records if r.output_tokens) == tokens
    assert log["prefill_tokens"].sum() == sum(r.prompt_tokens for r in res.records)
    assert (log["duration_s"] > 0).all() and (log["start_s"].diff().dropna() > 0).all()
    dec = log[log["decode_seqs"] > 0]
    assert ((1 <= dec["decode_runs"]) & (dec["decode_runs"] <= dec["decode_seqs"])).all()
    assert (log.loc[log["decode_seqs"] == 0, "decode_runs"] == 0).all()
    res.write(tmp_path)
    written = pd.read_csv(tmp_path / "iterations.csv")
    assert list(written.columns) == list(log.columns) and len(written) == len(log)


def test_local_driver_runs_without_extra_weight_buffers_where_they_crash(tiny_gguf, monkeypatch):
    """llama.cpp runs in this process: where a child's decode crashes with its extra weight buffers on
    (forced here), the driver turns them off and says so."""
    import calibrate.replay.local as local

    seen = []
    real_engine = local.LlamaEngine

    def engine(path, cfg):
        seen.append(cfg.extra_bufts)
        return real_engine(path, cfg)

    monkeypatch.setattr(local, "extra_bufts_crash", lambda path: "SIGSEGV")
    monkeypatch.setattr(local, "LlamaEngine", engine)
    reqs = _reqs(2)
    res = replay_local(reqs, tiny_gguf, concurrency=1, cfg=LocalConfig(n_seq_max=1, n_ctx_per_seq=256, n_threads=1))
    assert_complete_and_causal(res, reqs)
    assert seen == [False] and res.config["extra_weight_buffers_off"] == "a decode crashed with them on (SIGSEGV)"
    monkeypatch.setattr(local, "extra_bufts_crash", lambda path: "")
    assert "extra_weight_buffers_off" not in replay_local(reqs, tiny_gguf, concurrency=1, cfg=LocalConfig(
        n_seq_max=1, n_ctx_per_seq=256, n_threads=1)).config and seen == [False, True]
