"""The infersim trace format: JSON Lines, one request per line — read, validate, write.

`TraceLine` (a pydantic model) *is* the format: `infersim trace schema` prints its JSON Schema, and
every line that the loader rejects is explained by validating it against that model. Accepted
lines go through a plain-Python fast path that checks the same rules without building a model
(a pydantic object per line would triple the load time of a million-line trace; see
`benchmarks/trace_load.py`); `tests/test_trace.py` checks that both paths agree.

`iter_trace` streams: it holds one line at a time (plus one float, the previous arrival), so a
consumer that streams never needs the whole file in memory. Only `sort=True` reads everything.
"""

from __future__ import annotations

import difflib
import gzip
import io
import json
import math
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import from_json

from sim.errors import ConfigError, pydantic_error_to_config_error
from workloads.request import Request

SCHEMA_ID = "https://infersim.dev/schema/trace-line-v1.json"


class TraceLine(BaseModel):
    """One line of an infersim trace (JSON Lines: one such object per line, arrivals non-decreasing)."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,  # JSON types as written: "12" is not a token count, true is not 1
        title="infersim trace line",
        json_schema_extra={
            "$id": SCHEMA_ID,
            # Cross-field rules the loader also checks (see `_cross_check`).
            "dependentRequired": {"think_s": ["session_id"], "prefix_id": ["prefix_tokens"], "prefix_tokens": ["prefix_id"]},
        },
    )

    arrival_s: float = Field(
        ge=0, allow_inf_nan=False,
        description="Seconds from the start of the trace when the request is sent. Non-decreasing from line to line.",
    )
    prompt_tokens: int = Field(ge=1, description="Tokens in the prompt (the whole prompt, shared prefix included).")
    output_tokens: int = Field(ge=1, description="Tokens the model really generates for this request.")
    max_tokens: int | None = Field(
        None, ge=1,
        description="The client's output budget (what a server knows); >= output_tokens. Default: output_tokens.",
    )
    id: str | int | None = Field(None, description="Request id; default: the line number.")
    session_id: str | int | None = Field(None, description="Conversation / client this request belongs to.")
    think_s: float | None = Field(
        None, ge=0, allow_inf_nan=False,
        description=(
            "Closed loop: send this request think_s seconds after the response to the previous request of "
            "the same session_id completes; arrival_s is then the earliest send time. Needs session_id."
        ),
    )
    prefix_id: str | int | None = Field(
        None, description="Requests with the same prefix_id share their first prefix_tokens prompt tokens (cacheable)."
    )
    prefix_tokens: int = Field(0, ge=0, description="Length of the shared prefix; <= prompt_tokens; needs prefix_id.")
    prefix_blocks: list[int] | None = Field(
        None,
        description="Hashes of the prompt's KV blocks, in order (Mooncake style): equal hashes are reusable KV.",
    )
    tokens_estimated: bool = Field(
        False, description="True when token counts were estimated from text without a tokenizer."
    )


FIELDS: tuple[str, ...] = tuple(TraceLine.model_fields)
_ALLOWED = frozenset(FIELDS)
_INF = math.inf


def trace_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one trace line, generated from `TraceLine`."""
    schema = TraceLine.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


# ---- reading ------------------------------------------------------------------------------------


def _open_text(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


def _is_num(x: Any) -> bool:
    t = type(x)
    return t is int or t is float


_CORE = frozenset(("id", "arrival_s", "prompt_tokens", "output_tokens"))


def _fast_fields(obj: dict) -> tuple | None:
    """The plain-Python twin of `TraceLine` validation: the line's fields, or None if any rule fails.

    None does not mean the line is bad — the caller then asks pydantic, which decides and explains.
    """
    a = obj.get("arrival_s")
    p = obj.get("prompt_tokens")
    o = obj.get("output_tokens")
    # NaN fails every comparison, so `0 <= a < inf` also rejects it.
    if not ((type(a) is float or type(a) is int) and 0 <= a < _INF
            and type(p) is int and p >= 1 and type(o) is int and o >= 1):
        return None
    rid = obj.get("id")
    if rid is not None and type(rid) is not str and type(rid) is not int:
        return None
    if obj.keys() <= _CORE:  # the common line: nothing optional to check
        return (float(a), p, o, None, rid, None, None, None, 0, None, False)
    if not (obj.keys() <= _ALLOWED):
        return None
    m = obj.get("max_tokens")
    if m is not None and not (type(m) is int and m >= 1):
        return None
    sid = obj.get("session_id")
    pid = obj.get("prefix_id")
    for v in (sid, pid):
        if v is not None and type(v) is not str and type(v) is not int:
            return None
    th = obj.get("think_s")
    if th is not None and not (_is_num(th) and 0 <= th < _INF):
        return None
    pt = obj.get("prefix_tokens", 0)
    if not (type(pt) is int and pt >= 0):
        return None
    pb = obj.get("prefix_blocks")
    if pb is not None:
        if type(pb) is not list or not all(type(b) is int for b in pb):
            return None
        pb = tuple(pb)
    est = obj.get("tokens_estimated", False)
    if type(est) is not bool:
        return None
    return (float(a), p, o, m, rid, sid, th, pid, pt, pb, est)


def _cross_check(p: int, o: int, m: int | None, sid, th, pid, pt: int) -> tuple[str, str] | None:
    """Rules between fields that JSON Schema types alone do not express: (field, problem) or None."""
    if m is not None and m < o:
        return "max_tokens", f"{m} is below output_tokens {o} (a server never generates more than max_tokens)"
    if pt > p:
        return "prefix_tokens", f"{pt} exceeds prompt_tokens {p} (the prefix is part of the prompt)"
    if pid is not None and pt == 0:
        return "prefix_tokens", "must be >= 1 when prefix_id is given"
    if pid is None and pt > 0:
        return "prefix_id", "required when prefix_tokens is given"
    if th is not None and sid is None:
        return "session_id", "required when think_s is given (think time follows the session's previous response)"
    return None


def _slow_fields(obj: Any, file: str, line: int) -> tuple:
    """Validate with the pydantic model: it either raises the user-facing error or returns the fields."""
    if not isinstance(obj, dict):
        raise ConfigError(f"expected a JSON object, got {type(obj).__name__}", file=file, line=line)
    unknown = sorted(set(obj) - _ALLOWED)
    if unknown:
        name = unknown[0]
        close = difflib.get_close_matches(name, FIELDS, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else f" (allowed: {', '.join(FIELDS)})"
        raise ConfigError("unknown field" + hint, file=file, line=line, field=name)
    try:
        t = TraceLine.model_validate(obj)
    except ValidationError as exc:
        raise pydantic_error_to_config_error(exc, file=file, line=line) from None
    pb = tuple(t.prefix_blocks) if t.prefix_blocks is not None else None
    return (float(t.arrival_s), t.prompt_tokens, t.output_tokens, t.max_tokens, t.id, t.session_id,
            t.think_s, t.prefix_id, t.prefix_tokens, pb, t.tokens_estimated)


def _json(text: str, file: str, line: int) -> Any:
    try:
        # pydantic-core's Rust JSON parser: ~4x json.loads on trace lines (benchmarks/trace_load.py)
        return from_json(text)
    except ValueError as exc:
        raise ConfigError(f"invalid JSON: {exc}", file=file, line=line) from None


def parse_line(text: str, *, file: str = "<trace>", line: int = 1) -> Request:
    """One trace line -> `Request`, or `ConfigError` naming file, line and field."""
    obj = _json(text, file, line)
    fields = _fast_fields(obj) if type(obj) is dict else None
    if fields is None:
        fields = _slow_fields(obj, file, line)
    a, p, o, m, rid, sid, th, pid, pt, pb, est = fields
    if m is not None or pid is not None or pt or th is not None:
        bad = _cross_check(p, o, m, sid, th, pid, pt)
        if bad:
            raise ConfigError(bad[1], file=file, line=line, field=bad[0])
    # positional, in `Request` field order (faster than keywords on the million-line path)
    return Request(
        str(rid) if rid is not None else str(line), a, p, o, m if m is not None else o,
        str(sid) if sid is not None else None, str(pid) if pid is not None else None, pt, pb, line,
        float(th) if th is not None else None, est,
    )


def iter_trace(path: str | Path, *, sort: bool = False) -> Iterator[Request]:
    """Stream the requests of a JSONL trace (`.jsonl` or `.jsonl.gz`), validating every line.

    Blank lines are skipped. Raises `ConfigError(file=, line=, field=)` at the first bad line,
    when arrivals go backwards (unless `sort`: then the whole file is read and stably sorted by
    `arrival_s`), and when the file holds no request at all.
    """
    path = Path(path)
    file = str(path)
    if not path.is_file():
        raise ConfigError("no such trace file" if not path.exists() else "not a file", file=file)
    if sort:
        reqs = list(iter_trace_unsorted(path))
        reqs.sort(key=lambda r: r.arrival_s)
        yield from reqs
        return
    yield from iter_trace_unsorted(path, check_order=True)


def iter_trace_unsorted(path: Path, *, check_order: bool = False) -> Iterator[Request]:
    """The line loop of `iter_trace`; `check_order` makes a decreasing arrival an error."""
    file = str(path)
    prev_s = 0.0
    n = 0
    try:
        with _open_text(path) as fh:
            for lineno, text in enumerate(fh, start=1):
                if not text.strip():
                    continue
                r = parse_line(text, file=file, line=lineno)
                if check_order and r.arrival_s < prev_s:
                    raise ConfigError(
                        f"{r.arrival_s:g} is before the previous request's {prev_s:g} "
                        "(arrivals must be non-decreasing; use --sort / sort=True to sort them)",
                        file=file, line=lineno, field="arrival_s",
                    )
                prev_s = r.arrival_s
                n += 1
                yield r
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text ({exc.reason})", file=file) from None
    except (OSError, EOFError) as exc:  # unreadable or truncated .gz
        raise ConfigError(f"cannot read: {exc}", file=file) from None
    if n == 0:
        raise ConfigError("the trace holds no request", file=file)


def load_trace(path: str | Path, *, sort: bool = False) -> list[Request]:
    """All requests of a trace as a list (see `iter_trace`)."""
    return list(iter_trace(path, sort=sort))


# ---- writing ------------------------------------------------------------------------------------


def request_to_json(r: Request) -> dict[str, Any]:
    """The trace-line dict of a request, optional fields only when they differ from their default."""
    d: dict[str, Any] = {"id": r.id, "arrival_s": r.arrival_s, "prompt_tokens": r.prompt_tokens,
                         "output_tokens": r.output_tokens}
    if r.max_tokens != r.output_tokens:
        d["max_tokens"] = r.max_tokens
    if r.session_id is not None:
        d["session_id"] = r.session_id
    if r.think_s is not None:
        d["think_s"] = r.think_s
    if r.prefix_id is not None:
        d["prefix_id"] = r.prefix_id
        d["prefix_tokens"] = r.prefix_tokens
    if r.prefix_blocks is not None:
        d["prefix_blocks"] = list(r.prefix_blocks)
    if r.tokens_estimated:
        d["tokens_estimated"] = True
    return d


def dumps_request(r: Request) -> str:
    """One trace line (no newline). Deterministic: same request, same bytes."""
    return json.dumps(request_to_json(r), separators=(", ", ": "), allow_nan=False)


def write_trace(requests: Iterable[Request], path: str | Path | io.TextIOBase) -> int:
    """Write requests as JSON Lines (gzip if the name ends in .gz); returns the count written."""
    if isinstance(path, io.TextIOBase):
        return _write_lines(requests, path)
    p = Path(path)
    if p.parent and not p.parent.exists():
        raise ConfigError("output folder does not exist", file=p.parent)
    # write beside, then rename: a failure half-way never leaves a truncated trace under the real name
    tmp = p.with_name(p.name + ".part")
    try:
        if p.suffix == ".gz":
            # no file name and mtime=0 in the gzip header: the same trace always gives the same bytes
            with open(tmp, "wb") as out, gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as raw, \
                    io.TextIOWrapper(raw, encoding="utf-8", newline="\n") as fh:
                n = _write_lines(requests, fh)
        else:
            with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
                n = _write_lines(requests, fh)
        os.replace(tmp, p)
    finally:
        tmp.unlink(missing_ok=True)
    return n


def _write_lines(requests: Iterable[Request], fh) -> int:
    n = 0
    for r in requests:
        fh.write(dumps_request(r))
        fh.write("\n")
        n += 1
    return n
