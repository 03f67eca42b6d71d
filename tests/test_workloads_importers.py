"""Importers on excerpts of the real Azure 2023 and Mooncake traces, and on small synthetic
BurstGPT / ShareGPT / vLLM files written in their documented formats (tests/data/SOURCES.md)."""

from __future__ import annotations

import csv
import json
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from sim.errors import ConfigError
from workloads.importers import convert, detect_format, estimate_tokens

DATA = Path(__file__).parent / "data"


def _azure_rows(name: str) -> list[tuple[float, int, int]]:
    """(seconds after the first row, context, generated) computed independently from the CSV."""
    with open(DATA / name) as fh:
        rows = list(csv.DictReader(fh))
    ts = [datetime.fromisoformat(r["TIMESTAMP"]) for r in rows]
    return [((t - ts[0]).total_seconds(), int(r["ContextTokens"]), int(r["GeneratedTokens"])) for t, r in zip(ts, rows)]


@pytest.mark.parametrize("name, fmt", [
    ("azure_conv_excerpt.csv", "azure"), ("azure_code_excerpt.csv", "azure"),
    ("mooncake_conversation_excerpt.jsonl", "mooncake"), ("burstgpt_v1_synthetic.csv", "burstgpt"),
    ("burstgpt_v3_synthetic.csv", "burstgpt"), ("sharegpt_synthetic.json", "sharegpt"),
    ("vllm_custom_synthetic.jsonl", "vllm-json"),
])
def test_format_is_detected_from_the_content(name, fmt):
    assert detect_format(DATA / name) == fmt


@pytest.mark.parametrize("name", ["azure_conv_excerpt.csv", "azure_code_excerpt.csv"])
def test_azure_rows_become_requests_with_relative_arrivals(name):
    res = convert(DATA / name)
    expected = _azure_rows(name)
    assert res.format == "azure" and len(res.requests) == len(expected) == 40
    for r, (t, c, g) in zip(res.requests, expected):
        # timestamps carry 0.1 us; arrivals are kept to the microsecond
        assert r.arrival_s == pytest.approx(t, abs=1e-6)
        assert (r.prompt_tokens, r.output_tokens, r.max_tokens) == (c, g, g)
    assert res.requests[0].arrival_s == 0.0
    assert res.requests[0].id == "2"  # the CSV line it came from


def test_azure_window_sample_and_rate_scale():
    rows = _azure_rows("azure_conv_excerpt.csv")
    inside = [row for row in rows if 5.0 <= row[0] < 15.0]
    res = convert(DATA / "azure_conv_excerpt.csv", start_s=5, end_s=15)
    assert len(res.requests) == len(inside) > 0
    assert res.requests[0].arrival_s == 0.0
    assert res.requests[-1].arrival_s == pytest.approx(inside[-1][0] - inside[0][0], abs=1e-6)

    scaled = convert(DATA / "azure_conv_excerpt.csv", rate_scale=2.0)
    full = convert(DATA / "azure_conv_excerpt.csv")
    assert [r.arrival_s for r in scaled.requests] == pytest.approx([r.arrival_s / 2 for r in full.requests], abs=1e-6)

    a = convert(DATA / "azure_conv_excerpt.csv", sample=10, seed=1)
    b = convert(DATA / "azure_conv_excerpt.csv", sample=10, seed=1)
    c = convert(DATA / "azure_conv_excerpt.csv", sample=10, seed=2)
    assert a.requests == b.requests and a.requests != c.requests
    assert len(a.requests) == 10 and a.requests[0].arrival_s == 0.0
    source = {(p, o) for _, p, o in rows}
    assert all((r.prompt_tokens, r.output_tokens) in source for r in a.requests)
    assert [r.arrival_s for r in a.requests] == sorted(r.arrival_s for r in a.requests)


def test_mooncake_keeps_block_hashes_and_converts_milliseconds():
    lines = [json.loads(x) for x in (DATA / "mooncake_conversation_excerpt.jsonl").read_text().splitlines()]
    res = convert(DATA / "mooncake_conversation_excerpt.jsonl")
    assert len(res.requests) == 30
    for r, src in zip(res.requests, lines):
        assert r.arrival_s == src["timestamp"] / 1000
        assert (r.prompt_tokens, r.output_tokens) == (src["input_length"], src["output_length"])
        assert r.prefix_blocks == tuple(src["hash_ids"])


def test_burstgpt_drops_failed_requests_and_reads_sessions():
    res = convert(DATA / "burstgpt_v1_synthetic.csv")
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in res.requests] == [
        (0.0, 472, 18), (40.0, 1087, 230), (113.0, 417, 276), (125.0, 90, 45)]
    assert any("1 rows with 0 prompt or output tokens dropped" in n for n in res.notes)
    v3 = convert(DATA / "burstgpt_v3_synthetic.csv")
    assert [(r.arrival_s, r.session_id) for r in v3.requests] == [
        (0.0, "5f0c6f2e-0001"), (0.5, "5f0c6f2e-0002"), (29.75, "5f0c6f2e-0001")]


def test_sharegpt_estimates_tokens_from_text_and_says_so():
    res = convert(DATA / "sharegpt_synthetic.json")
    # a1: 40 and 101 chars; a2: the first human->gpt pair after a system turn; a3 has no pair
    assert [(r.prompt_tokens, r.output_tokens) for r in res.requests] == [
        (10, 26), (estimate_tokens("hello there"), estimate_tokens("Hi! How can I help you today?")),
        (estimate_tokens("Explain KV caching in one sentence."),
         estimate_tokens("It stores attention keys and values of earlier tokens so they are not recomputed."))]
    assert all(r.tokens_estimated for r in res.requests)
    assert any("ESTIMATES" in n for n in res.notes)
    assert any("1 conversations without a human->gpt pair skipped" in n for n in res.notes)
    assert {r.arrival_s for r in res.requests} == {0.0}


def test_untimed_dataset_gets_seeded_poisson_arrivals_with_rate():
    a = convert(DATA / "sharegpt_synthetic.json", rate_per_s=2.0, seed=3)
    b = convert(DATA / "sharegpt_synthetic.json", rate_per_s=2.0, seed=3)
    t = [r.arrival_s for r in a.requests]
    assert t == [r.arrival_s for r in b.requests] and t[0] == 0.0 and t == sorted(t) and t[-1] > 0


def test_vllm_custom_dataset_defaults_missing_output_to_vllms_256():
    res = convert(DATA / "vllm_custom_synthetic.jsonl")
    assert [r.output_tokens for r in res.requests] == [10, 1520, 256]
    assert [r.prompt_tokens for r in res.requests] == [estimate_tokens("What is the capital of India?"),
                                                       estimate_tokens("What is the capital of Iran?"),
                                                       estimate_tokens("What is the capital of China?")]


def test_infersim_trace_can_be_windowed_and_scaled(tmp_path):
    src = Path(__file__).resolve().parents[1] / "workloads" / "examples" / "chat.jsonl"
    res = convert(src, start_s=10, end_s=60, rate_scale=0.5)
    assert res.format == "infersim"
    t = np.array([r.arrival_s for r in res.requests])
    assert t[0] == 0.0 and t[-1] < 2 * 50


@pytest.mark.parametrize("content, name, message", [
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,abc,44\n", "bad.csv",
     "bad.csv:2: ContextTokens: not a token count: 'abc'"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,3,44\n", "bad.csv",
     "bad.csv:2: TIMESTAMP: not a time: 'yesterday'"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 2}\n{"timestamp": 1, "input_length": 5}\n', "m.jsonl",
     "m.jsonl:2: output_length: missing"),
    ("a,b\n1,2\n", "x.csv", "x.csv: cannot tell the trace format from its first line"),
])
def test_bad_sources_are_config_errors_naming_file_line_field(tmp_path, content, name, message):
    p = tmp_path / name
    p.write_text(content)
    with pytest.raises(ConfigError) as exc:
        convert(p)
    assert exc.value.format().startswith(str(tmp_path) + "/" + message)


def test_window_without_requests_and_bad_options_are_config_errors():
    with pytest.raises(ConfigError, match="no request in the window"):
        convert(DATA / "azure_conv_excerpt.csv", start_s=10_000)
    with pytest.raises(ConfigError, match="must be a positive number"):
        convert(DATA / "azure_conv_excerpt.csv", rate_scale=0)
    with pytest.raises(ConfigError, match="unknown format 'parquet'"):
        convert(DATA / "azure_conv_excerpt.csv", fmt="parquet")
