"""Span files that come compressed (``traces.csv.gz``, ``spans.json.xz``): read as the file they hold.

Public fault-injection datasets and trace-store exports often ship their span files compressed. ``drill traces
analyze`` takes them as they are: a file whose first bytes are a gzip, bzip2 or xz stream (the name does not
matter) is decompressed into a private temporary folder, and that file is what the format detection and the
readers see; the folder is removed when the command ends. Everything the readers locate (``file:line``) names
the file as ``<path> (decompressed)``.

Bounded, whatever the file holds:

- a stream that decompresses to more than :data:`MAX_RATIO` times its own size, or past
  :data:`MAX_DECOMPRESSED_BYTES`, is not read: an input error (exit 2) that says so (a decompression bomb gets
  there in a fraction of a second, and the partial output is removed);
- a stream cut short or damaged part way (a truncated download) is read as far as it goes: the spans before the
  damage are read, and the damage is counted as one unreadable record, located, never dropped silently;
- a ZIP archive or a Zstandard stream is an input error with what to do (these hold folders, or need a
  decompressor Python does not ship).
"""

from __future__ import annotations

import bz2
import lzma
import os
import tempfile
import zlib
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from drill.errors import InputError
from drill.rundir.files import open_input

__all__ = ["MAX_DECOMPRESSED_BYTES", "MAX_RATIO", "SpanFile", "compression_of", "decompressed"]

#: Bytes of output a compressed span file may decompress to, at most, per byte of its own (text traces compress
#: 5-30x; a decompression bomb is a thousand times or more).
MAX_RATIO = 200
#: ... and in all.
MAX_DECOMPRESSED_BYTES = 16 * 1024**3
_CHUNK = 1024 * 1024

_MAGIC = {"gzip": b"\x1f\x8b", "bzip2": b"BZh", "xz": b"\xfd7zXZ\x00"}
_UNSUPPORTED = {
    b"PK\x03\x04": "a ZIP archive: unzip it and pass the span files it holds",
    b"\x28\xb5\x2f\xfd": "a Zstandard stream: decompress it first (zstd -d FILE)",
}
_SUFFIXES = (".gz", ".gzip", ".bz2", ".xz", ".tgz")
_DAMAGED = (OSError, EOFError, lzma.LZMAError, zlib.error)


@dataclass(frozen=True)
class SpanFile:
    """A span file as the readers see it: ``path`` (the given file, or its decompressed copy)."""

    given: Path
    path: Path
    compression: str | None = None  # "gzip" | "bzip2" | "xz"; None: read as it is
    damage: str | None = None  # where a damaged or cut-short stream stopped being readable

    def shown(self, text: str) -> str:
        """``text`` (a location a reader gave) naming the given file instead of its decompressed copy."""
        return text if self.path == self.given else text.replace(str(self.path), f"{self.given} (decompressed)")


def compression_of(path: Path) -> str | None:
    """The compression ``path`` is in, from its first bytes: "gzip", "bzip2", "xz", or None (not compressed)."""
    with open_input(path) as fh:
        head = fh.read(8)
    for magic, what in _UNSUPPORTED.items():
        if head.startswith(magic):
            raise InputError(f"{path}: {what}")
    return next((name for name, magic in _MAGIC.items() if head.startswith(magic)), None)


@contextmanager
def decompressed(path: Path) -> Iterator[SpanFile]:
    """``path`` as a :class:`SpanFile`: itself when it is not compressed, else its content decompressed into a
    temporary folder that is removed on exit (module doc: the bounds)."""
    compression = compression_of(path)
    if compression is None:
        yield SpanFile(path, path)
        return
    with tempfile.TemporaryDirectory(prefix="drill-spans-") as folder:
        name = path.name[: -len(path.suffix)] if path.suffix.lower() in _SUFFIXES else path.name + ".out"
        out = Path(folder) / (name or "spans")
        damage = _decompress(path, compression, out)
        yield SpanFile(path, out, compression, damage)


def _decompress(path: Path, compression: str, out: Path) -> str | None:
    """Write ``path``'s content to ``out``; returns where a damaged or cut-short stream stopped (None: whole)."""
    with open_input(path) as raw, out.open("xb") as sink:  # a new file in a new private folder
        limit = min(MAX_RATIO * max(os.fstat(raw.fileno()).st_size, 1), MAX_DECOMPRESSED_BYTES)
        output = _Output(compression)
        try:
            for chunk in output.chunks(raw):
                if output.written > limit:
                    raise InputError(
                        f"{path}: its {compression} stream decompresses to more than {limit:,} bytes "
                        f"({MAX_RATIO}x its size, at most {MAX_DECOMPRESSED_BYTES:,}): not read, a decompression "
                        "bomb or not; decompress it yourself if it is real"
                    )
                _write(sink, chunk, out)
        except _DAMAGED as exc:
            written = f"{output.written:,} bytes of output"
            return f"{path}: {compression} stream damaged after {written} ({exc}); the rest is not read"
        if not output.ended:
            return f"{path}: {compression} stream cut short after {output.written:,} bytes of output (no end marker)"
    return None


class _Output:
    """A compressed stream's output in chunks of at most :data:`_CHUNK` bytes, however far a few input bytes
    expand; streams one after the other (``cat a.gz b.gz``, pigz, pbzip2) are read on. The output before damage
    or a cut is kept: the decompressor objects give what they decoded so far."""

    def __init__(self, compression: str) -> None:
        self.compression = compression
        self.written = 0
        self.ended = True  # the last stream reached its end marker (True before any input: an empty file)

    def _new(self) -> Any:  # zlib's decompress object, bz2.BZ2Decompressor or lzma.LZMADecompressor
        if self.compression == "gzip":
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        return bz2.BZ2Decompressor() if self.compression == "bzip2" else lzma.LZMADecompressor()

    def chunks(self, raw: IO[bytes]) -> Generator[bytes, None, None]:
        decoder = None
        while data := raw.read(_CHUNK):
            while data:
                if decoder is None:
                    data = data.lstrip(b"\0")  # padding after a stream (tar, dd) ends the input, not a new stream
                    if not data:
                        break
                    decoder, self.ended = self._new(), False
                data = yield from self._feed(decoder, data)
                if decoder.eof:
                    decoder, self.ended = None, True

    def _feed(self, decoder: Any, data: bytes) -> Generator[bytes, None, bytes]:
        """Output of ``data`` through ``decoder``; returns the input left after the stream's end marker."""
        while True:
            if self.compression == "gzip":  # zlib keeps the input it did not use; the others keep their output
                chunk = decoder.decompress(data, _CHUNK)
                data, more = decoder.unconsumed_tail, bool(decoder.unconsumed_tail)
            else:
                chunk, data = decoder.decompress(data, _CHUNK), b""
                more = not decoder.needs_input and not decoder.eof
            if chunk:
                self.written += len(chunk)
                yield chunk
            if decoder.eof:
                return decoder.unused_data
            if not more:
                return b""


def _write(sink: IO[bytes], chunk: bytes, out: Path) -> None:
    try:
        sink.write(chunk)
    except OSError as exc:
        raise InputError(
            f"no room to decompress into {out.parent} ({exc.strerror}): set TMPDIR to a folder with more space"
        ) from exc
