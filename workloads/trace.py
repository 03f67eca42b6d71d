"""The infersim trace format: JSON Lines, one request per line — read, validate, write.

`TraceLine` (a pydantic model) *is* the format: `infersim trace schema` prints its JSON Schema and
the loader validates every line against it (`model_validate_json`: pydantic-core's Rust parser and
validator), then checks the rules between fields. A hand-written plain-Python fast path was tried
and measured no faster (about 3.5 us per line both ways, most of it building the frozen `Request`;
see `benchmarks/trace_load.py`), so there is one path and schema and validation cannot disagree.

`iter_trace` streams: it holds one line at a time (plus one float, the previous arrival), so a
consumer that streams never needs the whole file in memory. Only `sort=True` reads everything.
"""

from __future__ import annotations

import difflib
import gzip
import io
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sim.errors import ConfigError
from workloads.request import MAX_TIME_S, MAX_TOKENS, Request

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
        ge=0, le=MAX_TIME_S, allow_inf_nan=False,
        description="Seconds from the start of the trace when the request is sent. Non-decreasing from line to line.",
    )
    prompt_tokens: int = Field(ge=1, le=MAX_TOKENS, description="Tokens in the prompt (the whole prompt, shared prefix included).")
    output_tokens: int = Field(ge=1, le=MAX_TOKENS, description="Tokens the model really generates for this request.")
    max_tokens: int | None = Field(
        None, ge=1, le=MAX_TOKENS,
        description="The client's output budget (what a server knows); >= output_tokens. Default: output_tokens.",
    )
    id: str | int | None = Field(None, description="Request id; default: the line number.")
    session_id: str | int | None = Field(None, description="Conversation / client this request belongs to.")
    think_s: float | None = Field(
        None, ge=0, le=MAX_TIME_S, allow_inf_nan=False,
        description=(
            "Closed loop: send this request think_s seconds after the response to the previous request of "
            "the same session_id completes; arrival_s is then the earliest send time. Needs session_id."
        ),
    )
    prefix_id: str | int | None = Field(
        None, description="Requests with the same prefix_id share their first prefix_tokens prompt tokens (cacheable)."
    )
    prefix_tokens: int = Field(0, ge=0, le=MAX_TOKENS, description="Length of the shared prefix; <= prompt_tokens; needs prefix_id.")
    prefix_blocks: list[Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]] | None = Field(
        None,
        description="Hashes of the prompt's KV blocks, in order (Mooncake style): equal hashes are reusable KV.",
    )
    tokens_estimated: bool = Field(
        False, description="True when token counts were estimated from text without a tokenizer."
    )


FIELDS: tuple[str, ...] = tuple(TraceLine.model_fields)
_validate_json = TraceLine.model_validate_json


def trace_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one trace line, generated from `TraceLine`."""
    schema = TraceLine.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


# ---- reading ------------------------------------------------------------------------------------


def _open_text(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


def _cross_check(t: TraceLine) -> tuple[str, str] | None:
    """Rules between fields that JSON Schema types alone do not express: (field, problem) or None."""
    if t.max_tokens is not None and t.max_tokens < t.output_tokens:
        return "max_tokens", f"{t.max_tokens} is below output_tokens {t.output_tokens} (a server never generates more than max_tokens)"
    if t.prefix_tokens > t.prompt_tokens:
        return "prefix_tokens", f"{t.prefix_tokens} exceeds prompt_tokens {t.prompt_tokens} (the prefix is part of the prompt)"
    if t.prefix_id is not None and t.prefix_tokens == 0:
        return "prefix_tokens", "must be >= 1 when prefix_id is given"
    if t.prefix_id is None and t.prefix_tokens > 0:
        return "prefix_id", "required when prefix_tokens is given"
    if t.think_s is not None and t.session_id is None:
        return "session_id", "required when think_s is given (think time follows the session's previous response)"
    return None


_TOKENS_WHY = "a token count is a 32-bit integer in the engines simulated"
_TIME_WHY = "the trace horizon, 3.2 years: later times lose their sub-microsecond resolution"
#: field -> why its upper bound (workloads.request.MAX_TOKENS, MAX_TIME_S), for the error line
_LIMITS = {"prompt_tokens": _TOKENS_WHY, "output_tokens": _TOKENS_WHY, "max_tokens": _TOKENS_WHY,
           "prefix_tokens": _TOKENS_WHY, "arrival_s": _TIME_WHY, "think_s": _TIME_WHY}


def _num(x) -> str:
    """A number for an error line: exact when short, else 6 significant digits (1e+23)."""
    return str(x) if isinstance(x, int) and abs(x) < 10**12 else f"{x:.6g}"


def _line_error(exc: ValidationError, file: str, line: int) -> ConfigError:
    """The first problem of a line, as `FILE:LINE: field: problem`. An unknown field comes first
    (with the closest real name): a misspelling also causes the "Field required" of the real one."""
    errs = sorted(exc.errors(include_url=False), key=lambda e: e["type"] != "extra_forbidden")
    first = errs[0]
    field = ".".join(str(p) for p in first["loc"]) or None
    more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
    if first["type"] == "extra_forbidden":
        close = difflib.get_close_matches(str(first["loc"][0]), FIELDS, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else f" (allowed: {', '.join(FIELDS)})"
        return ConfigError("unknown field" + hint + more, file=file, line=line, field=field)
    if first["type"] == "json_invalid":
        # the parser counts lines within this one line's text; only the column means anything here
        msg = re.sub(r" at line \d+ column (\d+)$", r" (column \1)", first["ctx"]["error"])
        return ConfigError(f"invalid JSON: {msg}", file=file, line=line)
    if first["type"] == "model_type":
        return ConfigError(f"expected a JSON object, got {type(first['input']).__name__}", file=file, line=line)
    if first["type"] == "less_than_equal" and field in _LIMITS:
        return ConfigError(f"{_num(first['input'])} is above the limit of {_num(first['ctx']['le'])} ({_LIMITS[field]})"
                           + more, file=file, line=line, field=field)
    return ConfigError(first["msg"] + more, file=file, line=line, field=field)


def parse_line(text: str, *, file: str = "<trace>", line: int = 1) -> Request:
    """One trace line -> `Request`, or `ConfigError` naming file, line and field."""
    try:
        t = _validate_json(text)
    except ValidationError as exc:
        raise _line_error(exc, file, line) from None
    if t.max_tokens is not None or t.prefix_id is not None or t.prefix_tokens or t.think_s is not None:
        bad = _cross_check(t)
        if bad:
            raise ConfigError(bad[1], file=file, line=line, field=bad[0])
    # positional, in `Request` field order (faster than keywords on the million-line path)
    return Request(
        str(t.id) if t.id is not None else str(line), t.arrival_s, t.prompt_tokens, t.output_tokens,
        t.max_tokens if t.max_tokens is not None else t.output_tokens,
        str(t.session_id) if t.session_id is not None else None,
        str(t.prefix_id) if t.prefix_id is not None else None, t.prefix_tokens,
        tuple(t.prefix_blocks) if t.prefix_blocks is not None else None, line, t.think_s, t.tokens_estimated,
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
        reqs = list(_iter_lines(path))
        reqs.sort(key=lambda r: r.arrival_s)
        yield from reqs
        return
    yield from _iter_lines(path, check_order=True)


def _iter_lines(path: Path, *, check_order: bool = False) -> Iterator[Request]:
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
    from sim.files import atomic_path, write_error

    p = Path(path)
    if p.parent and not p.parent.exists():
        raise ConfigError("output folder does not exist", file=p.parent)
    # write beside, then rename (sim.files): a failure half-way never leaves a truncated trace under the real name
    with atomic_path(p, field="--output") as tmp:
        try:
            if p.suffix == ".gz":
                # no file name and mtime=0 in the gzip header: the same trace always gives the same bytes
                with open(tmp, "wb") as out, gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as raw, \
                        io.TextIOWrapper(raw, encoding="utf-8", newline="\n") as fh:
                    n = _write_lines(requests, fh)
            else:
                with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
                    n = _write_lines(requests, fh)
        except OSError as e:
            raise write_error(p, e, field="--output") from None
    return n


def _write_lines(requests: Iterable[Request], fh) -> int:
    n = 0
    for r in requests:
        fh.write(dumps_request(r))
        fh.write("\n")
        n += 1
    return n
