"""The public-measurement corpus: figures other people measured on hardware infersim cannot touch.

`benchmarks/public/*.csv` hold one row per published figure (schema: benchmarks/public/README.md).
This module reads them into `PublicRow`s and checks every field a fit relies on: a row with a
bad field is one `ConfigError` naming the file, the line and the column (the CLI prints it on one
line and exits 2). Nothing here estimates a figure; it only reads what the files say.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from sim.errors import ConfigError

COLUMNS = (
    "row_id", "source", "source_ref", "engine", "engine_version", "backend", "device", "device_variant",
    "n_devices", "model", "quant", "metric", "batch", "request_rate", "input_tokens", "output_tokens", "depth",
    "quantity", "value", "as_printed", "derivation", "settings", "notes",
)
ENGINES = ("llama.cpp", "ollama", "vllm", "trtllm", "sglang", "tgi", "mlx", "lmstudio")
METRICS = ("pp", "tg", "batched", "offline", "serving")
QUANTITIES = ("prompt_tps", "decode_tps", "decode_tps_per_user", "output_tps", "total_tps",
              "tpot_ms", "ttft_ms", "itl_ms", "e2e_s")
# which quantities a metric can carry (a pp row reports prompt tokens/s, never a TTFT)
_METRIC_QUANTITIES = {
    "pp": {"prompt_tps"},
    "tg": {"decode_tps"},
    "batched": {"prompt_tps", "decode_tps", "decode_tps_per_user", "output_tps", "total_tps", "e2e_s",
                "ttft_ms", "tpot_ms", "itl_ms"},
    "offline": {"output_tps", "total_tps"},
    "serving": {"output_tps", "total_tps", "tpot_ms", "ttft_ms", "itl_ms", "e2e_s", "decode_tps_per_user"},
}


def default_corpus_dir() -> Path:
    """`benchmarks/public` of this checkout (the corpus ships with the repository, not the wheel)."""
    return Path(__file__).resolve().parent.parent / "benchmarks" / "public"


@dataclass(frozen=True)
class PublicRow:
    """One published figure, typed. `file` and `line` say where it was read (for messages)."""

    row_id: str
    source: str
    source_ref: str
    engine: str
    engine_version: str
    backend: str
    device: str
    n_devices: int
    model: str
    quant: str
    metric: str
    batch: int | None
    request_rate: float | None
    input_tokens: int | None
    output_tokens: int | None
    depth: int
    quantity: str
    value: float
    settings_text: str
    file: str = ""
    line: int = 0
    extra: dict = field(default_factory=dict, compare=False)

    @cached_property
    def settings(self) -> dict[str, str]:
        """`key=value;...` as a dict (keys lower-cased; a bare word maps to '')."""
        out: dict[str, str] = {}
        for part in self.settings_text.split(";"):
            part = part.strip()
            if not part:
                continue
            k, _, v = part.partition("=")
            out[k.strip().lower()] = v.strip()
        return out

    @property
    def ubatch(self) -> int | None:
        """The physical batch the row's run printed (llama-bench / llama-batched-bench `n_ubatch`, `-ub`)."""
        return self.setting_int("n_ubatch", "ubatch", "ub")

    def setting_int(self, *keys: str) -> int | None:
        """The first of `keys` in the settings that holds an integer (e.g. n_ubatch=2048)."""
        for k in keys:
            v = self.settings.get(k)
            if v:
                head = v.split()[0].split("(")[0]
                try:
                    return int(float(head))
                except ValueError:
                    continue
        return None

    def setting_flag(self, key: str) -> bool:
        """Whether the settings switch `key` on (enforce_eager=1, =true, =yes)."""
        return self.settings.get(key, "").lower() in ("1", "true", "yes", "on")

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def _number(text: str, *, name: str, file: str, line: int, required: bool, whole: bool,
            minimum: float) -> float | None:
    """A cell as a number (a whole one when `whole`) >= `minimum` (> 0 when minimum is 0 and not
    whole); empty is None, or "is required"."""
    text = text.strip()
    if not text:
        if required:
            raise ConfigError("is required", file=file, line=line, field=name)
        return None
    kind = "a whole number" if whole else "a number"
    try:
        v = float(text)
    except ValueError:
        raise ConfigError(f"expected {kind}, got '{text}'", file=file, line=line, field=name) from None
    ok = math.isfinite(v) and (v == int(v) and v >= minimum if whole else v > minimum)
    if not ok:
        bound = f">= {minimum:g}" if whole else f"> {minimum:g}"
        raise ConfigError(f"expected {kind} {bound}, got '{text}'", file=file, line=line, field=name)
    return v


def _int(text: str, *, name: str, file: str, line: int, required: bool, minimum: int = 0) -> int | None:
    v = _number(text, name=name, file=file, line=line, required=required, whole=True, minimum=minimum)
    return None if v is None else int(v)


def _float(text: str, *, name: str, file: str, line: int, required: bool) -> float | None:
    return _number(text, name=name, file=file, line=line, required=required, whole=False, minimum=0.0)


def _need(rec: dict[str, str], col: str, file: str, line: int) -> str:
    """A CSV record's non-empty, stripped `col`; an empty one is a ConfigError naming file, line, column."""
    v = (rec.get(col) or "").strip()
    if not v:
        raise ConfigError("is required", file=file, line=line, field=col)
    return v


REPO_SOURCE = "repo:"  # a raw log committed in this repository, e.g. repo:benchmarks/gpu/<run>/x.log


def _check_source(source: str, file: str, line: int) -> None:
    """A row's source is a URL a reader can open, or (for figures measured with this repository's own
    scripts on a lent machine) `repo:<path>` to the committed raw log, which must exist."""
    if source.startswith(("http://", "https://")):
        return
    if source.startswith(REPO_SOURCE):
        rel = source[len(REPO_SOURCE):]
        if rel and (Path(__file__).resolve().parent.parent / rel).is_file():
            return
        raise ConfigError(f"names a repository file that does not exist: '{rel}'", file=file, line=line,
                          field="source")
    raise ConfigError(f"must be a URL a reader can open or repo:<path> of a committed log, got '{source}'",
                      file=file, line=line, field="source")


def parse_row(rec: dict[str, str], *, file: str, line: int, devices: set[str], models: set[str]) -> PublicRow:
    """Check one CSV record and type it; the first bad field is a ConfigError (file, line, column)."""
    def need(name: str) -> str:
        return _need(rec, name, file, line)

    row_id = need("row_id")
    source = need("source")
    _check_source(source, file, line)
    need("as_printed")
    engine = need("engine")
    if engine not in ENGINES:
        raise ConfigError(f"unknown engine '{engine}'; known: {', '.join(ENGINES)}", file=file, line=line, field="engine")
    device = need("device")
    if device not in devices:
        raise ConfigError(f"not a shipped hardware profile: '{device}'", file=file, line=line, field="device")
    model = need("model")
    if model not in models:
        raise ConfigError(f"not in the model catalog: '{model}'", file=file, line=line, field="model")
    quant = need("quant")
    from sim.catalog.quant import get_quant

    try:
        get_quant(quant)
    except ConfigError as e:
        raise ConfigError(e.problem, file=file, line=line, field="quant") from None
    metric = need("metric")
    if metric not in METRICS:
        raise ConfigError(f"unknown metric '{metric}'; known: {', '.join(METRICS)}", file=file, line=line, field="metric")
    quantity = need("quantity")
    if quantity not in QUANTITIES:
        raise ConfigError(f"unknown quantity '{quantity}'; known: {', '.join(QUANTITIES)}", file=file, line=line,
                          field="quantity")
    if quantity not in _METRIC_QUANTITIES[metric]:
        raise ConfigError(f"a '{metric}' row cannot report '{quantity}'", file=file, line=line, field="quantity")
    kw = dict(file=file, line=line)
    return PublicRow(
        row_id=row_id, source=source, source_ref=(rec.get("source_ref") or "").strip(), engine=engine,
        engine_version=(rec.get("engine_version") or "").strip(), backend=(rec.get("backend") or "").strip(),
        device=device,
        n_devices=_int(rec.get("n_devices") or "1", name="n_devices", required=True, minimum=1, **kw),
        model=model, quant=quant, metric=metric,
        batch=_int(rec.get("batch") or "", name="batch", required=False, minimum=1, **kw),
        request_rate=_float(rec.get("request_rate") or "", name="request_rate", required=False, **kw),
        input_tokens=_int(rec.get("input_tokens") or "", name="input_tokens", required=False, **kw),
        output_tokens=_int(rec.get("output_tokens") or "", name="output_tokens", required=False, **kw),
        depth=_int(rec.get("depth") or "0", name="depth", required=False, **kw) or 0,
        quantity=quantity,
        value=_float(rec.get("value") or "", name="value", required=True, **kw),
        settings_text=(rec.get("settings") or "").strip(),
        file=file, line=line,
        extra={k: (rec.get(k) or "") for k in ("as_printed", "derivation", "notes", "device_variant")},
    )


def load_corpus_file(path: str | Path, *, devices: set[str], models: set[str]) -> list[PublicRow]:
    """Every row of one corpus CSV (header checked; line numbers are the file's own)."""
    name = str(path)
    return [parse_row(rec, file=name, line=line, devices=devices, models=models)
            for line, rec in _csv_records(Path(path), COLUMNS)]


def _csv_records(path: Path, columns) -> Iterator[tuple[int, dict]]:
    """(line, record) for each row of a CSV whose header must hold `columns`; an unreadable file, a
    missing column or a row with more cells than the header is one ConfigError naming the file and
    line (the physical line the record ends on; quoted newlines are rare here)."""
    name = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read: {e}", file=name) from None
    reader = csv.DictReader(text.splitlines(keepends=True))
    header = reader.fieldnames or []
    missing = [c for c in columns if c not in header]
    if missing:
        raise ConfigError(f"missing column(s): {', '.join(missing)}", file=name, line=1, field=missing[0])
    for rec in reader:
        if None in rec:  # more cells than the header has
            raise ConfigError(f"{len(header) + len(rec[None])} cells, the header has {len(header)}", file=name,
                              line=reader.line_num)
        yield reader.line_num, rec


def corpus_files(directory: Path) -> list[Path]:
    """The corpus CSVs of a folder: every `*.csv` but the device micro-benchmark file."""
    return [f for f in sorted(Path(directory).glob("*.csv")) if f.name != MICROBENCH_FILE]


def load_corpus(directory: str | Path | None = None) -> list[PublicRow]:
    """All rows of every `*.csv` in the corpus folder, in file then line order; row ids unique."""
    from sim.catalog.hardware import available_profiles
    from sim.catalog.models import load_catalog

    d = Path(directory) if directory is not None else default_corpus_dir()
    if not d.is_dir():
        raise ConfigError("corpus folder not found", file=d)
    devices = set(available_profiles())
    models = set(load_catalog())
    rows: list[PublicRow] = []
    seen: dict[str, str] = {}
    for f in corpus_files(d):
        for r in load_corpus_file(f, devices=devices, models=models):
            if r.row_id in seen:
                raise ConfigError(f"duplicate row_id '{r.row_id}' (first at {seen[r.row_id]})", file=r.file,
                                  line=r.line, field="row_id")
            seen[r.row_id] = r.where
            rows.append(r)
    if not rows:
        raise ConfigError("no corpus rows (*.csv) found", file=d)
    return rows


# ---- device micro-benchmarks ----------------------------------------------------------------------

# `benchmarks/public/device_microbench.csv`: what a micro-benchmark (BabelStream, a tensor copy, a
# read kernel) measured on a shipped device: data about the device, not about an engine, so a
# device's own figure may anchor its predictions even when its engine rows are held out
# (calibrate/public_fit.py `bandwidth_anchor`). Schema: benchmarks/public/README.md.
MICROBENCH_FILE = "device_microbench.csv"
MICROBENCH_COLUMNS = ("device", "benchmark", "kernel", "quantity", "value", "unit", "as_printed", "derivation",
                      "source", "source_ref", "device_variant", "notes")
MICROBENCH_UNITS = {"memory_bandwidth": "GB/s", "matmul": "TFLOPS", "allreduce_time": "us"}


def allreduce_devices(kernel: str) -> int:
    """The device count an all-reduce micro-benchmark row ran over, from its kernel ('all_reduce 8 GPUs
    1K' -> 8); 0 when the kernel does not say."""
    m = re.search(r"\b(\d+) GPUs\b", kernel)
    return int(m.group(1)) if m else 0


@dataclass(frozen=True)
class MicroRow:
    """One published micro-benchmark figure of a device: `value` in `unit` (GB/s for
    memory_bandwidth, dense TFLOPS for matmul, microseconds per collective for allreduce_time),
    measured by `benchmark`'s `kernel`."""

    device: str
    benchmark: str
    kernel: str
    quantity: str
    value: float
    source: str
    file: str = ""
    line: int = 0


def load_microbench(path: str | Path | None = None) -> list[MicroRow]:
    """Every row of the micro-benchmark file (absent file: none). A bad field is one ConfigError
    naming the file, line and column, as for the corpus; (device, benchmark, kernel, quantity) is
    unique."""
    from sim.catalog.hardware import available_profiles

    path = Path(path) if path is not None else default_corpus_dir() / MICROBENCH_FILE
    if not path.is_file():
        return []
    name = str(path)
    devices = set(available_profiles())
    rows: list[MicroRow] = []
    seen: dict[tuple, int] = {}
    for line, rec in _csv_records(path, MICROBENCH_COLUMNS):
        def need(col: str) -> str:
            return _need(rec, col, name, line)

        device = need("device")
        if device not in devices:
            raise ConfigError(f"not a shipped hardware profile: '{device}'", file=name, line=line, field="device")
        benchmark, kernel = need("benchmark"), need("kernel")
        quantity = need("quantity")
        if quantity not in MICROBENCH_UNITS:
            raise ConfigError(f"unknown quantity '{quantity}'; known: {', '.join(MICROBENCH_UNITS)}", file=name,
                              line=line, field="quantity")
        unit = need("unit")
        if unit != MICROBENCH_UNITS[quantity]:
            raise ConfigError(f"a {quantity} figure is in {MICROBENCH_UNITS[quantity]}, got '{unit}'", file=name,
                              line=line, field="unit")
        if quantity == "allreduce_time" and allreduce_devices(kernel) < 2:
            raise ConfigError(f"an all-reduce's kernel names its device count ('all_reduce 8 GPUs 1K'), got '{kernel}'",
                              file=name, line=line, field="kernel")
        value = _float(rec.get("value") or "", name="value", file=name, line=line, required=True)
        need("as_printed")
        source = need("source")
        if not (source.startswith("http://") or source.startswith("https://")):
            raise ConfigError(f"must be a URL a reader can open, got '{source}'", file=name, line=line, field="source")
        key = (device, benchmark, kernel, quantity)
        if key in seen:
            raise ConfigError(f"duplicate {device} {benchmark} {kernel} {quantity} (first at line {seen[key]})",
                              file=name, line=line, field="kernel")
        seen[key] = line
        rows.append(MicroRow(device, benchmark, kernel, quantity, float(value), source, name, line))
    return rows
