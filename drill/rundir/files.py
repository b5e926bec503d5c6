"""The one way llm-drill opens a file it reads, and writes a file into a run directory.

Every input file — drill files, scenarios, trace-replay CSVs, span files, every file of a run directory — is
opened by :func:`open_input`, which never blocks and never reads what it should not:

- the file is opened with ``O_NONBLOCK`` (a FIFO opens at once instead of waiting for a writer) and refused
  unless ``fstat`` says it is a regular file: a FIFO, a device (``/dev/zero``), a socket or a directory is an
  :class:`UnsafeFileError`, exit 2;
- inside a run directory (``root`` given) every path component below the directory is opened relative to it
  with ``O_NOFOLLOW``: **every** symbolic link there is refused, whether it points inside the directory or out
  of it. A run directory that ``drill run`` wrote holds regular files and folders only, so a link in one was
  planted; following it would read (or, for a write, overwrite) a file that is not part of the run. A path
  that climbs out of the directory (``..``, an absolute path elsewhere) is refused too;
- the size is checked with ``fstat`` before anything is read (:func:`read_bytes`), and at most ``limit + 1``
  bytes are read even if the file grows meanwhile;
- JSON lines are read with a cap on one line's length (:func:`read_lines`): a longer line is skipped in
  bounded memory and reported (with its size, and whether it was only NUL bytes — what a crash can leave);
- JSON is parsed with a bound on nesting depth (:func:`loads_json`, :data:`MAX_JSON_DEPTH`): deeper is a
  located error, never a ``RecursionError``.

Writes into a run directory (:func:`write_in_run_dir`) go to a fresh temporary name created with
``O_CREAT | O_EXCL | O_NOFOLLOW`` relative to the directory and are renamed over the target: a link planted at
either name is replaced, never written through, and nothing outside the directory is touched.
"""

from __future__ import annotations

import errno
import fcntl
import io
import json
import os
import re
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path, PurePath
from typing import IO, Any, NamedTuple

from drill.errors import InputError

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "MAX_INPUT_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_LINE_BYTES",
    "JsonTooDeep",
    "Line",
    "UnsafeFileError",
    "check_run_dir",
    "inside",
    "json_error_where",
    "loads_json",
    "open_input",
    "read_bytes",
    "read_json",
    "read_lines",
    "write_in_run_dir",
]

#: A file a user writes by hand: a drill, a scenario, a stack or target config, a runbook.
MAX_INPUT_BYTES = 4 * 1024 * 1024
#: One whole document: a JSON file of a run directory (``resolved.json``, ``verdicts.json``, ...), a Jaeger
#: download, one OTLP protobuf file, a trace-replay CSV.
MAX_DOCUMENT_BYTES = 64 * 1024 * 1024
#: One line of a JSON-lines file (a request record with its prompt, a span with its attributes).
MAX_LINE_BYTES = 8 * 1024 * 1024
#: Arrays and objects nested in one JSON value. What llm-drill writes nests less than 15 deep.
MAX_JSON_DEPTH = 64

_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_SKIP_CHUNK = 1024 * 1024
_BUFFER = 1024 * 1024  # readline copies buffer by buffer: 8 KiB buffers make a long line slow to read


class UnsafeFileError(InputError):
    """An input file that must not be read (or written) as it is: not a regular file, a link inside a run
    directory, a path out of it, or over its size limit. Exit 2; nothing was read."""

    def __init__(self, path: Path | str, reason: str, *, hint: str | None = None) -> None:
        super().__init__(f"{path}: {reason}", hint=hint)
        self.path = str(path)
        self.reason = reason


class JsonTooDeep(ValueError):
    """JSON nested deeper than :data:`MAX_JSON_DEPTH`; ``pos`` is the offset of the bracket that went past it."""

    def __init__(self, pos: int) -> None:
        super().__init__(f"JSON nested more than {MAX_JSON_DEPTH} deep (at byte {pos})")
        self.pos = pos


# --- opening -----------------------------------------------------------------------------------------------


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _parts_below(path: Path, root: Path) -> tuple[str, ...]:
    """The components of ``path`` below ``root`` (lexically: no link is resolved); refuses a way out."""
    try:
        relative = PurePath(os.path.abspath(path)).relative_to(os.path.abspath(root))
    except ValueError:
        raise UnsafeFileError(path, f"outside the run directory {root}; only its own files are read") from None
    parts = relative.parts
    if not parts or ".." in parts:
        raise UnsafeFileError(path, f"not a file of the run directory {root}")
    return parts


def _open_below(path: Path, root: Path, last_flags: int) -> int:
    """A descriptor of ``path``, every component below ``root`` opened with ``O_NOFOLLOW`` relative to it."""
    parts = _parts_below(path, root)
    dir_fd = os.open(root, _DIR)
    try:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            try:
                fd = os.open(part, (last_flags if last else _DIR) | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK) and _is_link(part, dir_fd):
                    where = Path(root, *parts[: index + 1])
                    raise UnsafeFileError(
                        where,
                        "a symbolic link inside a run directory; links there are never followed",
                        hint="a run directory holds only regular files and folders: this one was altered",
                    ) from None
                raise
            os.close(dir_fd)
            dir_fd = fd
        fd, dir_fd = dir_fd, -1
        return fd
    finally:
        if dir_fd >= 0:
            os.close(dir_fd)


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def inside(run_dir: Path | str, relative: str) -> Path:
    """``run_dir / relative`` when that stays inside the run directory (a path a run's own file names, such as a
    sweep's variant folder); :class:`UnsafeFileError` when it climbs out or is absolute."""
    path = Path(run_dir) / relative
    if Path(relative).is_absolute():
        raise UnsafeFileError(relative, f"an absolute path where a path inside the run directory {run_dir} belongs")
    _parts_below(path, Path(run_dir))
    return path


def open_input(path: Path | str, *, root: Path | str | None = None) -> io.BufferedReader:
    """``path`` opened for reading in binary, if it is a regular file (never blocks on a FIFO or device).

    With ``root`` (a run directory), ``path`` must be inside it and no component below it may be a link.
    A missing file is ``FileNotFoundError`` as ``open`` raises it; the rest is :class:`UnsafeFileError`.
    """
    path = Path(path)
    fd = _open_below(path, Path(root), _READ) if root is not None else os.open(path, _READ)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnsafeFileError(path, f"{_kind(mode)}, not a regular file; only regular files are read")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return io.BufferedReader(io.FileIO(fd, "rb"), buffer_size=_BUFFER)
    except BaseException:
        os.close(fd)
        raise


def read_bytes(
    path: Path | str, *, limit: int = MAX_DOCUMENT_BYTES, what: str = "", root: Path | str | None = None
) -> bytes:
    """The whole of a regular file of at most ``limit`` bytes; its size is checked before reading."""
    with open_input(path, root=root) as fh:
        size = os.fstat(fh.fileno()).st_size
        data = fh.read(limit + 1) if size <= limit else b""
        if size > limit or len(data) > limit:
            kind = f"{what} files are" if what else "such a file is"
            raise UnsafeFileError(path, f"file is {max(size, len(data))} bytes; {kind} limited to {limit}")
    return data


def read_json(
    path: Path | str, *, limit: int = MAX_DOCUMENT_BYTES, what: str = "", root: Path | str | None = None
) -> Any:
    """One JSON document (UTF-8), bounded in size and depth; a bad one is an :class:`InputError` at
    ``file:line:col``. A missing file is ``FileNotFoundError``."""
    data = read_bytes(path, limit=limit, what=what, root=root)
    try:
        return loads_json(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(
            f"{json_error_where(path, data, exc)}: not valid JSON: {_first_line(exc)}",
            hint="the file is damaged; llm-drill writes it whole, once",
        ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]


def json_error_where(path: Path | str, data: bytes, exc: BaseException) -> str:
    """``file:line:col`` of a JSON error (``file`` when it has no position)."""
    pos = getattr(exc, "pos", None)
    if isinstance(exc, UnicodeDecodeError):
        pos = exc.start
    if not isinstance(pos, int):
        return str(path)
    line = data.count(b"\n", 0, pos) + 1
    col = pos - (data.rfind(b"\n", 0, pos) + 1) + 1
    return f"{path}:{line}:{col}"


#: Entries of a run directory :func:`check_run_dir` looks at before it gives up (a run holds a few dozen).
MAX_RUN_DIR_ENTRIES = 100_000


def check_run_dir(run_dir: Path | str) -> None:
    """Refuse a run directory with a link, a FIFO, a device or a socket anywhere in it (exit 2, all named).

    Run before ``drill judge`` and ``drill report`` read anything, so a received directory is refused as a
    whole instead of check by check; the readers refuse the same things again when they open a file.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputError(
            f"{run_dir}: not a run directory (there is no such directory)",
            hint="pass a directory that `drill run` created, such as reports/<drill>/<run id>",
        )
    found: list[str] = []
    seen = 0
    pending = [run_dir]
    while pending:
        folder = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError as exc:
            raise InputError(f"{folder}: cannot list the run directory: {exc.strerror or exc}") from None
        seen += len(entries)
        if seen > MAX_RUN_DIR_ENTRIES:
            raise UnsafeFileError(
                run_dir,
                f"more than {MAX_RUN_DIR_ENTRIES} files and folders: not a run directory as drill run writes one",
            )
        for entry in entries:
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
                target = f" -> {os.readlink(entry.path)}" if stat.S_ISLNK(mode) else ""
            except OSError as exc:  # gone meanwhile, or unreadable: it cannot be read as evidence either
                found.append(f"{entry.path} ({exc.strerror or exc})")
                continue
            if stat.S_ISDIR(mode):
                pending.append(Path(entry.path))
            elif not stat.S_ISREG(mode):
                found.append(f"{entry.path} ({_kind(mode)}{target})")
    if found:
        shown = "; ".join(sorted(found)[:5]) + (f"; and {len(found) - 5} more" if len(found) > 5 else "")
        raise UnsafeFileError(
            run_dir,
            f"not a run directory as drill run writes one: {shown}",
            hint="a run directory holds only regular files and folders; links in it are never followed",
        )


# --- JSON -------------------------------------------------------------------------------------------------

_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.S)


def _too_deep_at(raw: bytes) -> int | None:
    """The offset of the first bracket nested past :data:`MAX_JSON_DEPTH` (strings skipped), or None."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_JSON_DEPTH:  # the common case: cannot be that deep
        return None
    depth = 0
    for match in _TOKENS.finditer(raw):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return match.start()
        elif token in (b"]", b"}"):
            depth -= 1
    return None


def loads_json(raw: bytes | str) -> Any:
    """``json.loads`` with nesting bounded by :data:`MAX_JSON_DEPTH` (:class:`JsonTooDeep`, a ValueError)."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    deep = _too_deep_at(data)
    if deep is not None:
        raise JsonTooDeep(deep)
    try:
        return json.loads(data)
    except RecursionError:  # unreachable after the scan above; kept so no input can raise it
        raise JsonTooDeep(0) from None


# --- lines ------------------------------------------------------------------------------------------------


class Line(NamedTuple):
    """One line of a file: ``data`` with its newline, or None when it was longer than the cap (skipped)."""

    number: int  # 1-based
    data: bytes | None
    size: int  # bytes, newline included
    newline: bool  # it ends in a newline (only a file's last line can lack it: torn mid-write)
    only_nul: bool  # NUL bytes only (and its newline): the zero-filled tail a crash can leave

    def problem(self, limit: int = MAX_LINE_BYTES) -> str | None:
        """Why the line cannot be read as it is, or None."""
        if self.only_nul:
            return f"{self.size} NUL bytes skipped (the zero-filled tail a crash can leave)"
        if self.data is None:
            return f"line of {self.size} bytes skipped: longer than the {limit}-byte cap on one line"
        return None


def read_lines(fh: IO[bytes], limit: int = MAX_LINE_BYTES) -> Iterator[Line]:
    """The lines of a regular (seekable) file, none held longer than ``limit`` bytes: a longer line is skipped in
    bounded chunks.

    A run of NUL bytes where a line starts (a crash's zero-filled tail, maybe followed by what a later writer
    appended) is a :class:`Line` of its own (``only_nul``, however long), and what follows it on the same line is
    read as the line it is, with the same number.
    """
    number = 0
    continued = False  # the previous Line was a NUL run, and this one is the rest of its line
    while True:
        raw = fh.readline(limit + 1)
        if not raw:
            return
        number += not continued
        continued = False
        if raw[:1] == b"\x00":
            fh.seek(-len(raw), os.SEEK_CUR)
            yield Line(number, None, _skip_nul_run(fh), False, True)
            continued = True
            continue
        newline = raw.endswith(b"\n")
        if len(raw) <= limit or newline:
            yield Line(number, raw, len(raw), newline, False)
            continue
        skipped, newline = _skip_rest_of_line(fh)
        yield Line(number, None, len(raw) + skipped, newline, False)


def _skip_nul_run(fh: IO[bytes]) -> int:
    """Read past the NUL bytes at the file's position; returns how many."""
    run = 0
    while True:
        chunk = fh.read(_SKIP_CHUNK)
        body = chunk.lstrip(b"\x00")
        run += len(chunk) - len(body)
        if body:
            fh.seek(-len(body), os.SEEK_CUR)
        if body or not chunk:
            return run


def _skip_rest_of_line(fh: IO[bytes]) -> tuple[int, bool]:
    """Read past the rest of a line, its newline included; returns the bytes skipped and whether it had one."""
    skipped = 0
    while True:
        chunk = fh.read(_SKIP_CHUNK)
        if not chunk:
            return skipped, False
        end = chunk.find(b"\n")
        if end >= 0:
            fh.seek(end + 1 - len(chunk), os.SEEK_CUR)
            return skipped + end + 1, True
        skipped += len(chunk)


# --- writing ----------------------------------------------------------------------------------------------


def write_in_run_dir(run_dir: Path | str, name: str, data: bytes) -> Path:
    """Write ``name`` (a plain file name) in ``run_dir``, replacing it whole; never through a link.

    The bytes go to a fresh hidden temporary name created ``O_EXCL | O_NOFOLLOW`` in the directory (opened
    once, so a link swapped in for it cannot redirect the write), then are renamed over ``name``: a link
    planted at ``name`` is replaced by the file, not followed. An :class:`InputError` when the directory cannot
    be written.
    """
    run_dir = Path(run_dir)
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"not a plain file name: {name!r}")
    try:
        dir_fd = os.open(run_dir, _DIR)
    except OSError as exc:
        raise InputError(f"{run_dir}: cannot open the run directory to write {name}: {exc.strerror}") from None
    tmp = f".{name}.{secrets.token_hex(4)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException as exc:
        _remove(tmp, dir_fd)
        if isinstance(exc, OSError):
            raise InputError(
                f"{run_dir / name}: cannot write the file: {exc.strerror or exc}",
                hint="the run directory must be writable; the report files are rendered into it",
            ) from None
        raise
    finally:
        os.close(dir_fd)
    return run_dir / name


def _remove(name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass
