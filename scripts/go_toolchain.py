"""Install a Go toolchain from the Go module proxy, checked against the Go checksum database.

    python3 scripts/go_toolchain.py VERSION DEST      e.g. 1.24.6 .venv/go

The Go project publishes every toolchain as the module ``golang.org/toolchain@v0.0.1-go<VERSION>.<os>-<arch>``
(this is what ``GOTOOLCHAIN=go<VERSION>`` downloads: https://go.dev/doc/toolchain). The zip comes from the first
entry of ``GOPROXY`` (default https://proxy.golang.org) and its ``h1:`` hash from the checksum database through
the same proxy (``<proxy>/sumdb/sum.golang.org/lookup/...``, https://go.dev/ref/mod#checksum-database); the zip is
unpacked only when the hash matches (``golang.org/x/mod/sumdb/dirhash.Hash1``). Only the standard library is used,
so it runs on a machine with no Go at all.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import platform
import re
import shutil
import subprocess
import sys
import urllib.request
import zipfile

ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def version(go: str, env: dict[str, str] | None = None) -> str | None:
    """The version of the Go toolchain ``go`` is (``go env GOVERSION``, e.g. ``1.26.8``), or None when it says none.
    ``env``: the environment to ask it in (set ``GOTOOLCHAIN=local`` there so it does not switch toolchains)."""
    done = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=False, env=env)
    found = re.match(r"go(\d+\.\d+(?:\.\d+)?)", done.stdout.strip())
    return found.group(1) if done.returncode == 0 and found else None


def at_least(have: str, want: str) -> bool:
    """Version ``have`` is ``want`` or later, compared number by number (1.24.6 < 1.26.0)."""

    def numbers(text: str) -> tuple[int, ...]:
        return tuple(int(part) for part in re.findall(r"\d+", text)[:3])

    return numbers(have) >= numbers(want)


def proxy() -> str:
    first = os.environ.get("GOPROXY", "https://proxy.golang.org").split(",")[0].split("|")[0]
    return (first if first.startswith("http") else "https://proxy.golang.org").rstrip("/")


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=120) as response:  # noqa: S310 - a fixed https proxy URL
        return response.read()


def hash1(archive: zipfile.ZipFile) -> str:
    """dirhash.Hash1: sha256 over the sorted "<sha256 hex>  <name>" lines of every file."""
    lines = []
    for name in sorted(n for n in archive.namelist() if not n.endswith("/")):
        lines.append(f"{hashlib.sha256(archive.read(name)).hexdigest()}  {name}\n")
    return "h1:" + base64.b64encode(hashlib.sha256("".join(lines).encode()).digest()).decode()


def expected_hash(module: str, version: str) -> str:
    text = fetch(f"{proxy()}/sumdb/sum.golang.org/lookup/{module}@{version}").decode()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == module and parts[1] == version:
            return parts[2]
    raise SystemExit(f"the checksum database has no hash for {module}@{version}")


def install(go_version: str, dest: str) -> None:
    arch = ARCH.get(platform.machine().lower())
    if arch is None or not sys.platform.startswith("linux"):
        raise SystemExit(f"no Go toolchain module for {sys.platform}/{platform.machine()}")
    module, version = "golang.org/toolchain", f"v0.0.1-go{go_version}.linux-{arch}"
    archive = zipfile.ZipFile(io.BytesIO(fetch(f"{proxy()}/{module}/@v/{version}.zip")))
    want, got = expected_hash(module, version), hash1(archive)
    if got != want:
        raise SystemExit(f"the toolchain zip's hash {got} is not the checksum database's {want}: not installing it")
    prefix = f"{module}@{version}/"
    shutil.rmtree(dest, ignore_errors=True)
    for info in archive.infolist():
        if info.is_dir() or not info.filename.startswith(prefix):
            continue
        target = os.path.join(dest, info.filename[len(prefix) :])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as out:
            out.write(archive.read(info))
        mode = (info.external_attr >> 16) & 0o777
        os.chmod(target, mode or (0o755 if "/bin/" in target or "/pkg/tool/" in target else 0o644))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    install(sys.argv[1], sys.argv[2])
