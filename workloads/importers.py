"""Importers: public traces and benchmark datasets -> infersim requests.

Each reader turns one source format into a `SourceTrace` (columns as numpy arrays, times in
seconds); `convert` then applies the user's choices in a fixed order — time window, sample,
rebase to the first request, rate scaling — and returns `Request`s. Formats:

| format     | file                                  | columns used                                               |
|------------|---------------------------------------|------------------------------------------------------------|
| azure      | Azure LLM inference trace CSV (2023, 2024) | TIMESTAMP, ContextTokens, GeneratedTokens             |
| burstgpt   | BurstGPT CSV                          | Timestamp (s), Request tokens, Response tokens, Session ID |
| mooncake   | Mooncake FAST'25 JSONL                | timestamp (ms), input_length, output_length, hash_ids      |
| sharegpt   | ShareGPT JSON (list of conversations) | first human turn -> prompt, next gpt turn -> output (text)  |
| vllm-json  | vLLM `custom` dataset JSONL / JSON list | prompt (text) or prompt_tokens, output_tokens            |
| infersim   | an infersim trace                     | all fields (window / sample / scale an existing trace)     |

Text-only sources have no token counts: they are estimated as ceil(characters / 4) — OpenAI's
rule of thumb that one token is about 4 characters of English text — and the requests are marked
`tokens_estimated`.

Each format is registered once (`register_format`: name, reader, how to recognise its first line), in
`READERS`; a module in `workloads/formats/` is imported with this one, so a new importer is one file
there (docs/contributing.md).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from sim.errors import ConfigError
from workloads.request import Request
from workloads.trace import iter_trace

CHARS_PER_TOKEN = 4.0  # OpenAI help center: "1 token ~= 4 chars in English"
# vLLM's `custom` dataset uses --custom-output-len (default 256) when a line has no output_tokens.
VLLM_DEFAULT_OUTPUT_TOKENS = 256


@dataclass(frozen=True)
class SourceTrace:
    """A source's requests as columns. `arrival_s` is None for datasets without times."""

    format: str
    prompt_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64
    arrival_s: np.ndarray | None = None  # float64, seconds, any origin
    source_line: np.ndarray | None = None  # line (or item) number in the source, for ids
    session_id: list | None = None
    prefix_blocks: list | None = None
    extra: list | None = None  # full Requests (infersim format only)
    tokens_estimated: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __len__(self) -> int:
        return len(self.prompt_tokens)


def estimate_tokens(text: str) -> int:
    """Tokenizer-free token count of a text: ceil(chars / 4), at least 1 (see module docstring)."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


# ---- format detection ---------------------------------------------------------------------------


def detect_format(path: str | Path) -> str:
    """Guess a source's format from its header (CSV) or the keys of its first JSON object."""
    path = Path(path)
    file = str(path)
    if not path.is_file():
        raise ConfigError("no such file", file=file)
    try:
        with open(path, encoding="utf-8") as fh:
            first = fh.readline()
    except UnicodeDecodeError:
        raise ConfigError("not a text file (give --format, or decompress it first)", file=file) from None
    cols = {c.strip() for c in first.split(",")}
    for name, fmt in FORMAT_RULES.items():  # CSV headers first, in registration order
        if fmt.csv_columns and fmt.csv_columns <= cols:
            return name
    try:
        obj = next(_json_records(path), (0, None))[1]
    except (ConfigError, UnicodeDecodeError):
        obj = None
    if isinstance(obj, dict):
        keys = set(obj)
        for name, fmt in FORMAT_RULES.items():
            if fmt.json_keys is not None and fmt.json_keys(keys):
                return name
    raise ConfigError(
        f"cannot tell the trace format from its first line; give --format ({'|'.join(READERS)})", file=file
    )


# ---- readers ------------------------------------------------------------------------------------


def _read_csv(path: Path, needed: list[str], fmt: str) -> pd.DataFrame:
    try:
        df = pd.read_csv(path, skipinitialspace=True, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as exc:
        raise ConfigError(f"not a readable {fmt} CSV: {str(exc).splitlines()[0]}", file=path) from None
    missing = [c for c in needed if c not in df.columns]
    if missing:
        raise ConfigError(
            f"column '{missing[0]}' missing for format {fmt} (header has: {', '.join(df.columns)})", file=path, line=1
        )
    return df


def _int_column(df: pd.DataFrame, col: str, path: Path) -> np.ndarray:
    vals = pd.to_numeric(df[col], errors="coerce")
    bad = vals.isna() | (vals < 0) | (vals != vals.round())
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise ConfigError(f"not a token count: {df[col].iloc[i]!r}", file=path, line=i + 2, field=col)
    return vals.to_numpy(dtype=np.int64)


def _float_column(df: pd.DataFrame, col: str, path: Path) -> np.ndarray:
    vals = pd.to_numeric(df[col], errors="coerce")
    bad = vals.isna() | ~np.isfinite(vals)
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise ConfigError(f"not a number: {df[col].iloc[i]!r}", file=path, line=i + 2, field=col)
    return vals.to_numpy(dtype=np.float64)


def read_azure(path: Path) -> SourceTrace:
    """Azure LLM inference trace: TIMESTAMP is a wall-clock time (2023: '2023-11-16 18:17:03.9799600')."""
    df = _read_csv(path, ["TIMESTAMP", "ContextTokens", "GeneratedTokens"], "azure")
    ts = pd.to_datetime(df["TIMESTAMP"], errors="coerce", format="ISO8601")
    if ts.isna().any():
        i = int(np.flatnonzero(ts.isna().to_numpy())[0])
        raise ConfigError(f"not a time: {df['TIMESTAMP'].iloc[i]!r}", file=path, line=i + 2, field="TIMESTAMP")
    t0 = ts.min()
    arrival = (ts - t0).dt.total_seconds().to_numpy(dtype=np.float64)
    return _drop_empty(SourceTrace(
        "azure", _int_column(df, "ContextTokens", path), _int_column(df, "GeneratedTokens", path),
        arrival_s=arrival, source_line=np.arange(2, len(df) + 2),
    ))


def read_burstgpt(path: Path) -> SourceTrace:
    """BurstGPT: Timestamp in seconds from the start of the log; failed requests have 0 response tokens."""
    df = _read_csv(path, ["Timestamp", "Request tokens", "Response tokens"], "burstgpt")
    sessions = list(df["Session ID"]) if "Session ID" in df.columns else None
    return _drop_empty(SourceTrace(
        "burstgpt", _int_column(df, "Request tokens", path), _int_column(df, "Response tokens", path),
        arrival_s=_float_column(df, "Timestamp", path), source_line=np.arange(2, len(df) + 2),
        session_id=sessions,
    ))


def _json_records(path: Path):
    """(line or item number, object) for a JSON Lines file or a JSON array."""
    file = str(path)
    with open(path, encoding="utf-8") as fh:
        head = fh.read(1)
        while head and head.isspace():
            head = fh.read(1)
        fh.seek(0)
        if head == "[":
            try:
                data = json.load(fh)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"invalid JSON: {exc.msg}", file=file, line=exc.lineno) from None
            yield from enumerate(data, start=1)
            return
        for lineno, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                yield lineno, json.loads(text)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"invalid JSON: {exc.msg} (column {exc.colno})", file=file, line=lineno) from None


def _need(obj: object, key: str, kind: type | tuple, file: str, lineno: int):
    if not isinstance(obj, dict):
        raise ConfigError("expected a JSON object", file=file, line=lineno)
    if key not in obj:
        raise ConfigError("missing", file=file, line=lineno, field=key)
    v = obj[key]
    if not isinstance(v, kind) or isinstance(v, bool) or (isinstance(v, (int, float)) and v < 0):
        raise ConfigError(f"bad value {v!r}", file=file, line=lineno, field=key)
    return v


def read_mooncake(path: Path) -> SourceTrace:
    """Mooncake FAST'25 trace: timestamp in ms, hash_ids = 512-token block hashes (equal = reusable KV)."""
    file = str(path)
    t, p, o, lines, blocks = [], [], [], [], []
    for lineno, obj in _json_records(path):
        t.append(_need(obj, "timestamp", (int, float), file, lineno) / 1000.0)
        p.append(_need(obj, "input_length", int, file, lineno))
        o.append(_need(obj, "output_length", int, file, lineno))
        hb = obj.get("hash_ids")
        if hb is not None and not (isinstance(hb, list) and all(isinstance(b, int) for b in hb)):
            raise ConfigError("expected a list of integers", file=file, line=lineno, field="hash_ids")
        blocks.append(tuple(hb) if hb is not None else None)
        lines.append(lineno)
    return _drop_empty(SourceTrace(
        "mooncake", np.array(p, dtype=np.int64), np.array(o, dtype=np.int64),
        arrival_s=np.array(t, dtype=np.float64), source_line=np.array(lines), prefix_blocks=blocks,
    ))


def read_sharegpt(path: Path) -> SourceTrace:
    """ShareGPT: the first human message is the prompt and the reply after it the output (as vLLM's
    benchmark samples it); tokens estimated from characters. Conversations without such a pair are dropped."""
    file = str(path)
    p, o, lines = [], [], []
    skipped = 0
    for item, obj in _json_records(path):
        conv = _need(obj, "conversations", list, file, item)
        pair = None
        for a, b in zip(conv, conv[1:]):
            if isinstance(a, dict) and isinstance(b, dict) and a.get("from") == "human" and b.get("from") == "gpt":
                pair = (str(a.get("value", "")), str(b.get("value", "")))
                break
        if pair is None or not pair[0] or not pair[1]:
            skipped += 1
            continue
        p.append(estimate_tokens(pair[0]))
        o.append(estimate_tokens(pair[1]))
        lines.append(item)
    notes = (f"{skipped} conversations without a human->gpt pair skipped",) if skipped else ()
    return SourceTrace("sharegpt", np.array(p, dtype=np.int64), np.array(o, dtype=np.int64),
                       source_line=np.array(lines), tokens_estimated=True, notes=notes)


def read_vllm_json(path: Path) -> SourceTrace:
    """vLLM `custom` dataset: {"prompt": text, "output_tokens": n} per line (or a JSON list of them).
    `prompt_tokens` may replace the text; a line without output_tokens gets vLLM's default 256."""
    file = str(path)
    p, o, lines = [], [], []
    estimated = False
    defaulted = 0
    for lineno, obj in _json_records(path):
        if isinstance(obj, dict) and "prompt_tokens" in obj:
            p.append(_need(obj, "prompt_tokens", int, file, lineno))
        else:
            p.append(estimate_tokens(_need(obj, "prompt", str, file, lineno)))
            estimated = True
        if "output_tokens" in obj:
            o.append(_need(obj, "output_tokens", int, file, lineno))
        else:
            o.append(VLLM_DEFAULT_OUTPUT_TOKENS)
            defaulted += 1
        lines.append(lineno)
    notes = (f"{defaulted} lines without output_tokens got vLLM's default {VLLM_DEFAULT_OUTPUT_TOKENS}",) if defaulted else ()
    return _drop_empty(SourceTrace("vllm-json", np.array(p, dtype=np.int64), np.array(o, dtype=np.int64),
                                   source_line=np.array(lines), tokens_estimated=estimated, notes=notes))


def read_infersim(path: Path) -> SourceTrace:
    reqs = list(iter_trace(path, sort=True))
    return SourceTrace(
        "infersim",
        np.array([r.prompt_tokens for r in reqs], dtype=np.int64),
        np.array([r.output_tokens for r in reqs], dtype=np.int64),
        arrival_s=np.array([r.arrival_s for r in reqs], dtype=np.float64),
        source_line=np.array([r.line for r in reqs]),
        extra=reqs,
        tokens_estimated=any(r.tokens_estimated for r in reqs),
    )


@dataclass(frozen=True)
class TraceFormat:
    """How a format is read and recognised (`detect_format`)."""

    name: str
    read: Callable[[Path], SourceTrace]
    #: CSV columns its header line has (None: not a CSV format)
    csv_columns: frozenset[str] | None = None
    #: whether the keys of a file's first JSON object are this format's (None: not a JSON format)
    json_keys: Callable[[set[str]], bool] | None = None


#: Every format's reader by name, in the order `--format` lists them.
READERS: dict[str, Callable[[Path], SourceTrace]] = {}
FORMAT_RULES: dict[str, TraceFormat] = {}


def register_format(name: str, read: Callable[[Path], SourceTrace], *, csv_columns=None,
                    json_keys: Callable[[set[str]], bool] | None = None) -> TraceFormat:
    """Make `name` a format `read_source`, `convert` and `infersim trace convert --format` accept;
    detection tries formats in registration order (CSV headers, then a JSON object's keys)."""
    if name in READERS:
        raise ValueError(f"trace format '{name}' is registered already")
    fmt = TraceFormat(name, read, frozenset(csv_columns) if csv_columns else None, json_keys)
    READERS[name] = read
    FORMAT_RULES[name] = fmt
    return fmt


register_format("azure", read_azure, csv_columns={"ContextTokens", "GeneratedTokens"})
register_format("burstgpt", read_burstgpt, csv_columns={"Request tokens", "Response tokens"})
register_format("mooncake", read_mooncake, json_keys=lambda k: {"timestamp", "input_length", "output_length"} <= k)
register_format("sharegpt", read_sharegpt, json_keys=lambda k: "conversations" in k)
# an infersim trace has prompt_tokens too: its arrival_s tells it apart
register_format("vllm-json", read_vllm_json,
                json_keys=lambda k: ("prompt" in k or "prompt_tokens" in k) and "arrival_s" not in k)
register_format("infersim", read_infersim, json_keys=lambda k: "arrival_s" in k)


def _take(src: SourceTrace, idx: np.ndarray) -> SourceTrace:
    """The rows `idx` of a source (every column)."""
    def pick(col):
        if col is None:
            return None
        if isinstance(col, np.ndarray):
            return col[idx]
        return [col[i] for i in idx]

    return replace(
        src, prompt_tokens=src.prompt_tokens[idx], output_tokens=src.output_tokens[idx],
        arrival_s=pick(src.arrival_s), source_line=pick(src.source_line), session_id=pick(src.session_id),
        prefix_blocks=pick(src.prefix_blocks), extra=pick(src.extra),
    )


def _drop_empty(src: SourceTrace) -> SourceTrace:
    """Drop rows with 0 prompt or 0 output tokens (BurstGPT logs failed requests with 0 response tokens)."""
    keep = (src.prompt_tokens >= 1) & (src.output_tokens >= 1)
    dropped = int((~keep).sum())
    if not dropped:
        return src
    out = _take(src, np.flatnonzero(keep))
    return replace(out, notes=out.notes + (f"{dropped} rows with 0 prompt or output tokens dropped",))


def read_source(path: str | Path, fmt: str | None = None) -> SourceTrace:
    """Read a trace or dataset in any supported format (detected when `fmt` is None)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("no such file", file=path)
    fmt = fmt or detect_format(path)
    if fmt not in READERS:
        raise ConfigError(f"unknown format {fmt!r} (known: {', '.join(READERS)})", field="--format")
    src = READERS[fmt](path)
    if len(src) == 0:
        raise ConfigError(f"no usable request in this {fmt} file", file=path)
    return src


# ---- convert ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConvertResult:
    requests: list[Request]
    format: str
    source_rows: int
    notes: tuple[str, ...]


def convert(
    path: str | Path,
    *,
    fmt: str | None = None,
    start_s: float | None = None,
    end_s: float | None = None,
    sample: int | None = None,
    rate_scale: float = 1.0,
    rate_per_s: float | None = None,
    seed: int = 0,
) -> ConvertResult:
    """A source trace as infersim requests.

    Order of operations: (1) window [start_s, end_s) in seconds after the source's first request;
    (2) keep `sample` requests chosen uniformly without replacement (seeded), in time order;
    (3) arrivals become seconds after the first kept request; (4) divide them by `rate_scale`
    (2.0 replays the same requests at twice the request rate). Sources without times (ShareGPT,
    vLLM datasets) get Poisson arrivals at `rate_per_s` (seeded), or all arrive at 0 when it is None
    — vLLM's `--request-rate inf`.
    """
    if rate_scale <= 0 or not math.isfinite(rate_scale):
        raise ConfigError(f"must be a positive number, got {rate_scale}", field="--rate-scale")
    if sample is not None and sample < 1:
        raise ConfigError(f"must be >= 1, got {sample}", field="--sample")
    if rate_per_s is not None and rate_per_s <= 0:
        raise ConfigError(f"must be positive, got {rate_per_s}", field="--rate")
    src = read_source(path, fmt)
    n_source = len(src)
    notes = list(src.notes)
    rng = np.random.default_rng(seed)

    if src.arrival_s is None:
        if start_s is not None or end_s is not None:
            raise ConfigError(f"a {src.format} dataset has no times; a window needs a timed trace", field="--start-s")
        if sample is not None:
            src = _take(src, np.sort(rng.choice(len(src), size=min(sample, len(src)), replace=False)))
        n = len(src)
        if rate_per_s is None:
            arrival = np.zeros(n)
            notes.append("no arrival times in the source: every request arrives at 0 (give --rate for Poisson arrivals)")
        else:
            gaps = rng.exponential(1.0 / rate_per_s, size=n)
            gaps[0] = 0.0
            arrival = np.cumsum(gaps)
            notes.append(f"no arrival times in the source: Poisson arrivals at {rate_per_s:g} req/s (seed {seed})")
        src = replace(src, arrival_s=arrival)
    else:
        order = np.argsort(src.arrival_s, kind="stable")
        if not np.array_equal(order, np.arange(len(order))):
            src = _take(src, order)
        rel = src.arrival_s - src.arrival_s[0]
        keep = np.ones(len(rel), dtype=bool)
        if start_s is not None:
            keep &= rel >= start_s
        if end_s is not None:
            keep &= rel < end_s
        if not keep.all():
            src = _take(src, np.flatnonzero(keep))
        if len(src) == 0:
            raise ConfigError(f"no request in the window [{start_s}, {end_s}) s", field="--start-s")
        if sample is not None and sample < len(src):
            src = _take(src, np.sort(rng.choice(len(src), size=sample, replace=False)))
        if rate_per_s is not None:
            notes.append("--rate ignored: the source has its own arrival times (use --rate-scale)")

    arrival = (src.arrival_s - src.arrival_s[0]) / rate_scale
    # microsecond resolution: the sources have at most 0.1 µs (Azure) and 1 ms (Mooncake) ticks
    arrival = np.round(arrival, 6)
    requests = []
    for i in range(len(src)):
        if src.extra is not None:
            requests.append(replace(src.extra[i], arrival_s=float(arrival[i])))
            continue
        sid = src.session_id[i] if src.session_id is not None else None
        pb = src.prefix_blocks[i] if src.prefix_blocks is not None else None
        o = int(src.output_tokens[i])
        requests.append(Request(
            id=str(int(src.source_line[i])) if src.source_line is not None else str(i),
            arrival_s=float(arrival[i]), prompt_tokens=int(src.prompt_tokens[i]), output_tokens=o, max_tokens=o,
            session_id=str(sid) if sid not in (None, "") else None, prefix_blocks=pb,
            tokens_estimated=src.tokens_estimated,
        ))
    if src.tokens_estimated:
        notes.append(f"token counts are ESTIMATES: ceil(characters / {CHARS_PER_TOKEN:g}), no tokenizer")
    return ConvertResult(requests, src.format, n_source, tuple(notes))


def _import_format_modules() -> None:
    """Import every module of workloads/formats/: an importer in a file of its own registers itself."""
    import importlib
    import pkgutil

    from workloads import formats

    for mod in pkgutil.iter_modules(formats.__path__):
        importlib.import_module(f"{formats.__name__}.{mod.name}")


_import_format_modules()
