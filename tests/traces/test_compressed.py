"""Compressed span files (drill.traces.compressed): read as the file they hold, bounded, the damage counted."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import tempfile
from pathlib import Path

import pytest

from drill.errors import InputError
from drill.traces.compressed import MAX_RATIO, compression_of, decompressed
from tests.traces.spankit import write_spans
from tests.traces.test_csvfile import write_csv
from tests.traces.test_suspects import Fault, analyze_cli, shop

COMPRESS = {"gzip": gzip.compress, "bzip2": bz2.compress, "xz": lzma.compress}
SUFFIX = {"gzip": ".gz", "bzip2": ".bz2", "xz": ".xz"}


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folder the decompressed copies go to (TMPDIR), to see that nothing is left there."""
    folder = tmp_path / "tmpdir"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _compressed(path: Path, compression: str, name: str | None = None) -> Path:
    out = path.with_name(name or path.name + SUFFIX[compression])
    out.write_bytes(COMPRESS[compression](path.read_bytes()))
    return out


def _analysis(path: Path) -> dict:
    result = analyze_cli(path, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _top(document: dict) -> list[str]:
    return [s["service"] for s in document["analysis"]["ranking"]["suspects"][:3]]


@pytest.mark.parametrize("compression", ["gzip", "bzip2", "xz"])
def test_a_compressed_csv_reads_as_the_csv_it_holds_and_leaves_no_copy(tmp_path, private_tmp, compression) -> None:
    plain = write_csv(tmp_path / "traces.csv", shop(Fault(ingress_ms={"auth": 40.0})), "rcaeval")
    packed = _compressed(plain, compression, name="traces-archive.bin")  # the content tells, not the name
    expected, got = _analysis(plain), _analysis(packed)
    assert _top(got) == _top(expected) and _top(got)[0] == "auth"
    (info,) = got["files"]
    assert info["format"] == "csv_file" and info["compression"] == compression
    assert info["spans"] == expected["files"][0]["spans"] > 1000 and info["unreadable"] == 0
    assert list(private_tmp.iterdir()) == []  # the decompressed copy is gone with the command


def test_a_gzipped_receiver_file_in_two_streams_reads_whole(tmp_path, private_tmp) -> None:
    """``cat a.gz b.gz`` (and pigz, and streams padded with NULs) is one file of both streams' lines."""
    plain = write_spans(tmp_path / "spans.jsonl", shop(Fault(cpu={"cart": 2.0})))
    lines = plain.read_bytes().splitlines(keepends=True)
    half = len(lines) // 2
    packed = tmp_path / "spans.jsonl.gz"
    packed.write_bytes(gzip.compress(b"".join(lines[:half])) + gzip.compress(b"".join(lines[half:])) + bytes(512))
    got = _analysis(packed)
    assert got["files"][0]["format"] == "receiver" and got["files"][0]["spans"] == len(lines)
    assert got["files"][0]["unreadable"] == 0 and _top(got)[0] == "cart"


def test_a_stream_cut_short_reads_the_spans_before_the_cut_and_counts_the_cut(tmp_path, private_tmp) -> None:
    plain = write_csv(tmp_path / "traces.csv", shop(Fault(ingress_ms={"auth": 40.0})), "rcaeval")
    whole = gzip.compress(plain.read_bytes())
    cut = tmp_path / "traces.csv.gz"
    cut.write_bytes(whole[: len(whole) * 2 // 3])  # a download that stopped
    info = _analysis(cut)["files"][0]
    rows = len(plain.read_text().splitlines()) - 1
    assert rows // 2 < info["spans"] < rows
    assert info["where"][0].startswith(f"{cut}: gzip stream cut short after")
    # the torn row at the cut is the CSV reader's to count, located in the given file, not in a temporary copy
    assert info["unreadable"] == 2 and info["where"][1].startswith(f"{cut} (decompressed):")
    assert list(private_tmp.iterdir()) == []


def test_a_damaged_stream_keeps_what_came_before_the_damage(tmp_path, private_tmp) -> None:
    plain = write_spans(tmp_path / "spans.jsonl", shop())
    data = bytearray(lzma.compress(plain.read_bytes()))
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)  # overwritten in the middle
    damaged = tmp_path / "spans.jsonl.xz"
    damaged.write_bytes(bytes(data))
    with decompressed(damaged) as file:
        assert file.compression == "xz" and file.damage is not None and "xz stream damaged after" in file.damage
        kept = file.path.read_bytes()
    assert kept and plain.read_bytes().startswith(kept)  # a prefix of the content, nothing made up


def test_a_decompression_bomb_is_refused_and_leaves_nothing(tmp_path, private_tmp) -> None:
    bomb = tmp_path / "spans.jsonl.gz"
    bomb.write_bytes(gzip.compress(bytes(64 * 1024 * 1024), compresslevel=9))  # 64 MiB of NULs in about 64 KiB
    result = analyze_cli(bomb)
    assert result.exit_code == 2
    assert "decompression bomb" in result.output and f"{MAX_RATIO}x its size" in result.output
    assert list(private_tmp.iterdir()) == []


def test_archives_and_streams_python_cannot_read_are_input_errors_that_say_what_to_do(tmp_path) -> None:
    import zipfile

    archive = tmp_path / "traces.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("traces.csv", "traceID,spanID\n")
    with pytest.raises(InputError, match="a ZIP archive: unzip it"):
        compression_of(archive)
    zstd = tmp_path / "spans.jsonl.zst"
    zstd.write_bytes(b"\x28\xb5\x2f\xfd" + bytes(16))
    result = analyze_cli(zstd)
    assert result.exit_code == 2 and "zstd -d" in result.output


def test_a_file_that_is_not_compressed_is_read_in_place(tmp_path, private_tmp) -> None:
    plain = write_spans(tmp_path / "spans.jsonl", shop())
    with decompressed(plain) as file:
        assert file.path == plain and file.compression is None and file.damage is None
    assert file.shown(f"{plain}:3: bad") == f"{plain}:3: bad"
    empty = tmp_path / "empty.gz"
    empty.write_bytes(b"")
    assert compression_of(empty) is None


def test_what_is_wrong_inside_is_said_of_the_file_as_given(tmp_path, private_tmp) -> None:
    metrics = tmp_path / "metrics.csv.gz"
    metrics.write_bytes(gzip.compress(b"time,cpu,memory\n1,2,3\n"))
    result = analyze_cli(metrics)
    assert result.exit_code == 2 and f"{metrics} (decompressed): not a span file" in result.output
    assert str(private_tmp) not in result.output


def _damaged(rng, data: bytes) -> bytes:
    """``data`` cut, with bytes flipped, with garbage after it, or a bare header followed by noise."""
    how = rng.randrange(4)
    if how == 0:
        return data[: rng.randrange(len(data))]
    if how == 1:
        out = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            out[rng.randrange(len(out))] = rng.randrange(256)
        return bytes(out)
    if how == 2:
        return data + rng.randbytes(rng.randint(1, 64))
    return data[:10] + rng.randbytes(rng.randint(0, 4096))


@pytest.mark.parametrize("compression", ["gzip", "bzip2", "xz"])
def test_damaged_streams_of_any_kind_are_read_or_refused_never_a_crash_and_leave_nothing(
    tmp_path, private_tmp, compression
) -> None:
    import random

    rng = random.Random(18)
    spans = shop(Fault(cpu={"cart": 2.0}), seconds=20.0)
    plain = (
        write_csv(tmp_path / "traces.csv", spans, "rcaeval") if compression != "xz" else _as_receiver(tmp_path, spans)
    )
    packed = COMPRESS[compression](plain.read_bytes())
    for case in range(12):
        path = tmp_path / f"case-{case}{SUFFIX[compression]}"
        path.write_bytes(_damaged(rng, packed))
        result = analyze_cli(path, "--json")  # exceptions propagate: an unexpected one fails here
        assert result.exit_code in (0, 2), (case, result.output[-2000:])
        if result.exit_code == 0:
            files = json.loads(result.output)["files"]
            assert files[0]["compression"] == compression
            assert all(str(private_tmp) not in w for w in files[0]["where"]), files[0]["where"]
        assert list(private_tmp.iterdir()) == [], case


def _as_receiver(path: Path, spans: list[dict]) -> Path:
    return write_spans(path / "spans.jsonl", spans)
