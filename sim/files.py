"""Small file helpers shared by the simulator's tools: hashing, finding a YAML key's line, and writing
output files safely.

Every file a command writes goes through `atomic_write` (or its shorthands): the bytes go to a
temporary file beside the target (same folder, so the same filesystem), are flushed and fsynced,
and the temporary file is renamed over the target with `os.replace` — atomic on POSIX and Windows
within one filesystem, as pip and git write their files. A reader sees the old file or the whole
new one; a failure (full disk, read-only folder, Ctrl-C) leaves no partial file under the real
name and removes the temporary one. An `OSError` becomes one `ConfigError` line naming the file
(exit status 2), never a traceback.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from sim.errors import ConfigError


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB blocks (model files are gigabytes)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_error(path: str | Path, exc: OSError, *, field: str | None = None) -> ConfigError:
    """The one-line error of a failed write: `PATH: cannot write: No space left on device`."""
    reason = exc.strerror or str(exc)
    return ConfigError(f"cannot write: {reason}", file=path, field=field)


@contextlib.contextmanager
def atomic_path(path: str | Path, *, field: str | None = None) -> Iterator[Path]:
    """A temporary path beside `path` for a writer that wants a file name (pandas, pyarrow); on a
    clean exit of the block it is fsynced and renamed to `path`, on any exception removed. The
    parent folder is created. OSError -> `write_error`."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
    except OSError as e:
        raise write_error(path, e, field=field) from None
    tmp = Path(tmp_name)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; a plain open() would honour the umask
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise write_error(path, e, field=field) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", *, encoding: str | None = "utf-8", newline: str | None = None,
                 field: str | None = None) -> Iterator[IO]:
    """`open(path, mode)` that writes a temporary file and renames it on success (module docstring)."""
    binary = "b" in mode
    with atomic_path(path, field=field) as tmp:
        try:
            with open(tmp, mode, encoding=None if binary else encoding, newline=None if binary else newline) as f:
                yield f
        except OSError as e:
            raise write_error(path, e, field=field) from None


def atomic_write_text(path: str | Path, text: str, *, field: str | None = None) -> Path:
    """Write `text` (UTF-8) to `path` atomically; returns the path."""
    with atomic_write(path, field=field) as f:
        f.write(text)
    return Path(path)


def atomic_write_with(path: str | Path, writer: Callable[[Path], object], *, field: str | None = None) -> Path:
    """`writer(tmp_path)` (e.g. `df.to_csv`), then rename to `path`."""
    with atomic_path(path, field=field) as tmp:
        try:
            writer(tmp)
        except OSError as e:
            raise write_error(path, e, field=field) from None
    return Path(path)


def check_writable(folder: str | Path, *, field: str | None = "--out") -> Path:
    """Create `folder` if needed and prove a file can be created in it (then removed), so a long
    simulation does not end in a write error. Raises a one-line ConfigError otherwise."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ConfigError("cannot write here: a file, not a folder", file=folder, field=field)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".infersim-write-check.", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ConfigError(f"cannot write here: {e.strerror or e}", file=folder, field=field) from None
    return folder


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()  # read once, at import: os.umask can only be read by setting it


def line_of(path: Path, field: str) -> int | None:
    """1-based line where a top-level `field:` key appears in a YAML file, for error messages."""
    top = field.split(".")[0]
    for i, text in enumerate(path.read_text().splitlines(), start=1):
        if text.startswith(f"{top}:"):
            return i
    return None
