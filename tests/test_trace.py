"""The trace format: loading, validation errors, writing, schema."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.errors import ConfigError
from workloads.request import Request
from workloads.trace import (
    FIELDS,
    dumps_request,
    iter_trace,
    load_trace,
    parse_line,
    trace_schema,
    write_trace,
)

EXAMPLES = Path(__file__).resolve().parents[1] / "workloads" / "examples"


def _write(tmp_path: Path, *lines: str, name: str = "t.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def _error(path: Path, sort: bool = False) -> str:
    with pytest.raises(ConfigError) as exc:
        load_trace(path, sort=sort)
    return exc.value.format()


GOOD = '{"arrival_s": 0.5, "prompt_tokens": 100, "output_tokens": 20}'


def test_minimal_line_gets_defaults_from_the_format():
    r = parse_line(GOOD, file="f", line=7)
    assert r == Request(id="7", arrival_s=0.5, prompt_tokens=100, output_tokens=20, max_tokens=20, line=7)


def test_every_optional_field_is_read():
    line = json.dumps({"id": "a", "arrival_s": 1, "prompt_tokens": 10, "output_tokens": 5, "max_tokens": 8,
                       "session_id": 3, "think_s": 2, "prefix_id": "sys", "prefix_tokens": 4,
                       "prefix_blocks": [1, 2], "tokens_estimated": True})
    r = parse_line(line)
    assert (r.id, r.arrival_s, r.max_tokens, r.session_id, r.think_s, r.prefix_id, r.prefix_tokens,
            r.prefix_blocks, r.tokens_estimated) == ("a", 1.0, 8, "3", 2.0, "sys", 4, (1, 2), True)


def test_bad_json_names_file_and_line(tmp_path):
    p = _write(tmp_path, GOOD, '{"arrival_s": 1, "prompt_tokens": 3,, "output_tokens": 2}')
    msg = _error(p)
    assert msg.startswith(f"{p}:2: invalid JSON: ")


def test_missing_field_is_named(tmp_path):
    p = _write(tmp_path, GOOD, '{"arrival_s": 1, "prompt_tokens": 3}')
    assert _error(p) == f"{p}:2: output_tokens: Field required"


def test_misspelled_field_is_an_error_with_a_suggestion(tmp_path):
    p = _write(tmp_path, '{"arrival_s": 1, "prompt_tokens": 3, "output_tokens": 2, "prefx_tokens": 4}')
    assert _error(p) == f"{p}:1: prefx_tokens: unknown field (did you mean 'prefix_tokens'?)"


def test_negative_token_count_is_rejected(tmp_path):
    p = _write(tmp_path, '{"arrival_s": 1, "prompt_tokens": -3, "output_tokens": 2}')
    assert _error(p) == f"{p}:1: prompt_tokens: Input should be greater than or equal to 1"


def test_negative_arrival_is_rejected(tmp_path):
    p = _write(tmp_path, '{"arrival_s": -0.1, "prompt_tokens": 3, "output_tokens": 2}')
    assert _error(p) == f"{p}:1: arrival_s: Input should be greater than or equal to 0"


def test_token_count_as_string_or_float_is_rejected(tmp_path):
    p = _write(tmp_path, '{"arrival_s": 1, "prompt_tokens": "3", "output_tokens": 2}')
    assert _error(p) == f"{p}:1: prompt_tokens: Input should be a valid integer"
    p = _write(tmp_path, '{"arrival_s": 1, "prompt_tokens": 3.5, "output_tokens": 2}')
    assert _error(p) == f"{p}:1: prompt_tokens: Input should be a valid integer"


def test_out_of_order_arrivals_are_an_error_unless_sorted(tmp_path):
    p = _write(tmp_path, '{"arrival_s": 2, "prompt_tokens": 3, "output_tokens": 2}',
               '{"arrival_s": 1, "prompt_tokens": 4, "output_tokens": 2}')
    assert _error(p) == (f"{p}:2: arrival_s: 1 is before the previous request's 2 "
                         "(arrivals must be non-decreasing; use --sort / sort=True to sort them)")
    reqs = load_trace(p, sort=True)
    assert [(r.arrival_s, r.prompt_tokens, r.line) for r in reqs] == [(1.0, 4, 2), (2.0, 3, 1)]


@pytest.mark.parametrize("line, field, problem", [
    ('{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 5, "max_tokens": 4}', "max_tokens",
     "4 is below output_tokens 5 (a server never generates more than max_tokens)"),
    ('{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 5, "prefix_id": "a", "prefix_tokens": 4}',
     "prefix_tokens", "4 exceeds prompt_tokens 3 (the prefix is part of the prompt)"),
    ('{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 5, "prefix_id": "a"}', "prefix_tokens",
     "must be >= 1 when prefix_id is given"),
    ('{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 5, "prefix_tokens": 2}', "prefix_id",
     "required when prefix_tokens is given"),
    ('{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 5, "think_s": 2}', "session_id",
     "required when think_s is given (think time follows the session's previous response)"),
    ('{"arrival_s": NaN, "prompt_tokens": 3, "output_tokens": 5}', "arrival_s", "Input should be a finite number"),
    ('[1, 2]', None, "expected a JSON object, got list"),
])
def test_cross_field_and_shape_rules(tmp_path, line, field, problem):
    p = _write(tmp_path, line)
    where = f"{field}: " if field else ""
    assert _error(p) == f"{p}:1: {where}{problem}"


def test_missing_file_and_empty_file_are_config_errors(tmp_path):
    assert _error(tmp_path / "nope.jsonl") == f"{tmp_path / 'nope.jsonl'}: no such trace file"
    empty = _write(tmp_path, "", "")
    assert _error(empty) == f"{empty}: the trace holds no request"


def test_loading_streams_lazily(tmp_path):
    """A consumer that streams gets the first requests before the loader reads a later bad line."""
    p = _write(tmp_path, GOOD, GOOD, "not json at all")
    it = iter_trace(p)
    assert next(it).line == 1 and next(it).line == 2
    with pytest.raises(ConfigError, match=":3: invalid JSON"):
        next(it)


def test_gzip_trace_reads_like_plain(tmp_path):
    plain = _write(tmp_path, GOOD, '{"arrival_s": 1, "prompt_tokens": 9, "output_tokens": 1, "id": "x"}')
    gz = tmp_path / "t.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    assert [r.id for r in load_trace(gz)] == [r.id for r in load_trace(plain)]


def test_written_gzip_is_byte_identical_across_writes(tmp_path):
    reqs = load_trace(EXAMPLES / "chat.jsonl")
    a, b = tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl.gz"
    write_trace(reqs, a)
    write_trace(reqs, b)
    assert a.read_bytes() == b.read_bytes()
    assert load_trace(a) == [r for r in load_trace(EXAMPLES / "chat.jsonl")]


@pytest.mark.parametrize("name", ["chat", "coding", "rag", "bursty", "n-users", "chat-sessions"])
def test_shipped_examples_are_valid_traces(name):
    reqs = load_trace(EXAMPLES / f"{name}.jsonl")
    assert 50 <= len(reqs) <= 500


def test_n_users_example_is_a_fixed_long_prompt_with_512_output_tokens():
    reqs = load_trace(EXAMPLES / "n-users.jsonl")
    assert {(r.prompt_tokens, r.output_tokens, r.arrival_s) for r in reqs} == {(2000, 512, 0.0)}


def test_schema_is_generated_from_the_validating_model():
    schema = trace_schema()
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert set(schema["properties"]) == set(FIELDS)
    assert schema["required"] == ["arrival_s", "prompt_tokens", "output_tokens"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["prompt_tokens"]["minimum"] == 1


# ---- properties ---------------------------------------------------------------------------------

_ids = st.one_of(st.none(), st.text(max_size=6), st.integers(-5, 10**6))
_line_values = st.fixed_dictionaries(
    {"arrival_s": st.one_of(st.floats(-1, 1e7), st.sampled_from([math.nan, math.inf, -math.inf]), st.integers(-2, 10**7),
                            st.text(max_size=3), st.booleans()),
     "prompt_tokens": st.one_of(st.integers(-2, 10**6), st.floats(0, 10), st.booleans(), st.text(max_size=2)),
     "output_tokens": st.one_of(st.integers(-2, 10**6), st.none())},
    optional={
        "max_tokens": st.one_of(st.none(), st.integers(-1, 10**6), st.floats(0, 5)),
        "id": _ids, "session_id": _ids, "prefix_id": _ids,
        "think_s": st.one_of(st.none(), st.floats(-1, 100), st.integers(-1, 100), st.just("1")),
        "prefix_tokens": st.one_of(st.integers(-1, 10**6), st.booleans()),
        "prefix_blocks": st.one_of(st.none(), st.lists(st.integers(-3, 10**9), max_size=4),
                                   st.lists(st.one_of(st.integers(), st.text(max_size=1)), max_size=2)),
        "tokens_estimated": st.one_of(st.booleans(), st.integers(0, 1)),
        "promt_tokens": st.integers(1, 3),
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_line_values)
def test_any_line_becomes_a_request_or_a_one_line_config_error(obj):
    """Whatever a line holds, the loader returns a Request that satisfies the format's rules or
    raises a ConfigError naming the line — never another exception."""
    text = json.dumps(obj)
    try:
        r = parse_line(text, file="f.jsonl", line=3)
    except ConfigError as exc:
        assert exc.format().startswith("f.jsonl:3: ") and "\n" not in exc.format()
        return
    assert isinstance(r.arrival_s, float) and math.isfinite(r.arrival_s) and r.arrival_s >= 0
    assert type(r.prompt_tokens) is int and r.prompt_tokens >= 1 and type(r.output_tokens) is int
    assert r.max_tokens >= r.output_tokens >= 1 and 0 <= r.prefix_tokens <= r.prompt_tokens
    assert (r.prefix_id is None) == (r.prefix_tokens == 0)
    assert r.think_s is None or r.session_id is not None
    assert set(obj) <= set(FIELDS)


_requests = st.builds(
    lambda a, p, o, extra, sid, th, pid, pfrac, pb, est, rid: Request(
        id=rid, arrival_s=a, prompt_tokens=p, output_tokens=o, max_tokens=o + extra, session_id=sid,
        think_s=th if sid is not None else None, prefix_id=pid,
        prefix_tokens=max(1, int(p * pfrac)) if pid is not None else 0, prefix_blocks=pb, tokens_estimated=est),
    st.floats(0, 1e6, allow_nan=False), st.integers(1, 200_000), st.integers(1, 10_000), st.integers(0, 100),
    st.one_of(st.none(), st.text(max_size=5)), st.one_of(st.none(), st.floats(0, 600, allow_nan=False)),
    st.one_of(st.none(), st.text(max_size=5)), st.floats(0, 1), st.one_of(st.none(), st.lists(st.integers(0, 2**40), max_size=5).map(tuple)),
    st.booleans(), st.text(min_size=1, max_size=8),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_requests, min_size=1, max_size=20))
def test_write_then_read_gives_the_same_requests(tmp_path, reqs):
    reqs = sorted(reqs, key=lambda r: r.arrival_s)
    p = tmp_path / "rt.jsonl"
    write_trace(reqs, p)
    back = load_trace(p)
    assert [r.__class__(**{**{f: getattr(r, f) for f in r.__slots__}, "line": None}) for r in back] == reqs
    assert all(dumps_request(a) == dumps_request(b) for a, b in zip(back, reqs))
