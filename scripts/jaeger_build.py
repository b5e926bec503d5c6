#!/usr/bin/env python3
"""Build the real Jaeger the ``jaeger_api`` trace source's tests start (tests/traces/test_jaeger_api.py), once per
machine, and cache it.

Jaeger :data:`JAEGER` (v2, the all-in-one ``github.com/jaegertracing/jaeger/cmd/jaeger``) is built from the Go
module proxy with the ``go`` on PATH (scripts/setup.sh's ``setup_go`` puts a Go >= :data:`MIN_GO` there first).
``go install ...@v1.76.0`` refuses to build it (its go.mod has a replace directive), so the build runs in a
throw-away module that requires it as a tool (``go get -tool``). The entry is
``${JAEGER_DIR:-${XDG_CACHE_HOME:-~/.cache}/llm-drill/jaeger}/<key>/jaeger`` beside ``build.log`` and
``status.json`` (scripts/cached_build.py keeps the entry, its lock, the background start and the wait, as for
llama-server, vLLM and the Kubernetes control plane). ``./dev test`` starts the build in the background at nice 19,
so its three or more minutes of CPU are not spent before the first test; the Jaeger tests wait for it.
    python3 scripts/jaeger_build.py path          print the cached binary; exit 1 when it is not built
    python3 scripts/jaeger_build.py build         build it now unless cached (waits for a build already running)
    python3 scripts/jaeger_build.py background    start the build detached, at nice 19, unless cached or running
    python3 scripts/jaeger_build.py wait [SECS]   wait for a running build; exit 1 with the log's tail if it failed
    python3 scripts/jaeger_build.py versions      print the Jaeger version and the least Go that builds it
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))  # cached_build.py beside it, also when a test loads this file by its path

import cached_build  # noqa: E402
import go_toolchain  # noqa: E402

JAEGER = "v1.76.0"
MODULE = "github.com/jaegertracing/jaeger/cmd/jaeger"
MIN_GO = "1.24.6"  # jaeger v1.76.0's go.mod; `go get -tool` needs Go >= 1.24 too
GO_ENV = {"GOTOOLCHAIN": "local"}
BUILD_WAIT_S = 1800.0
#: Where else a Go may be, after PATH and the one ``setup_go`` installs into the virtualenv (``<prefix>/go``).
OTHER_GOS = ("/usr/local/go/bin/go",)
WHAT_TO_DO = (
    "  the Jaeger tests need it: fix the cause above and run ./dev setup again, or point the tests at a built one:\n"
    "  JAEGER_BIN=/path/to/jaeger"
)


class BuildError(cached_build.CacheError):
    """The build cannot start or did not finish; the message says why and what to do."""


def build_key() -> str:
    """``<jaeger version>-<12 hex>``: the hash of what the binary depends on."""
    facts = [JAEGER, MODULE, repr(sorted(GO_ENV.items()))]
    return f"{JAEGER}-{hashlib.sha256(chr(0).join(facts).encode()).hexdigest()[:12]}"


class Cache(cached_build.Cache):
    """One key's entry: the ``jaeger`` binary beside build.log and status.json."""

    name = "jaeger"
    title = f"Jaeger {JAEGER}"
    noun, doing, done = "build", "building", "built"
    what = "the Jaeger build"
    error = BuildError
    what_to_do = WHAT_TO_DO

    @classmethod
    def here(cls) -> Cache:
        return cls(cached_build.cache_root("JAEGER_DIR", "jaeger") / build_key())

    @property
    def product(self) -> Path:
        return self.folder / "jaeger"


def find_go() -> str:
    """The ``go`` on PATH (or the one ``setup_go`` installed into the virtualenv), when it is >= MIN_GO."""
    candidates = (shutil.which("go"), str(Path(sys.prefix) / "go" / "bin" / "go"), *OTHER_GOS)
    seen = []
    for candidate in (c for c in candidates if c and os.access(c, os.X_OK)):
        have = go_toolchain.version(candidate, _env())
        if have and go_toolchain.at_least(have, MIN_GO):
            return candidate
        seen.append(f"{candidate} ({have or 'no version'})")
    have = f"Go {', '.join(seen)} is too old" if seen else "Go is not installed"
    raise BuildError(f"{have}: building Jaeger {JAEGER} needs Go >= {MIN_GO} (./dev setup installs one)")


def _env() -> dict[str, str]:
    return {**os.environ, **GO_ENV}


def _run(command: list[str], cwd: Path, log) -> None:
    cached_build.run_step(command, cwd, log, BuildError, _env())


def _compile(work: Path, cache: Cache, log) -> tuple[dict[str, object], str]:
    go = find_go()
    cached_build.say(Cache.name, log, f"with {go}: {MODULE}@{JAEGER}")
    _run([go, "mod", "init", "drill.local/jaegerbuild"], work, log)
    _run([go, "get", "-tool", f"{MODULE}@{JAEGER}"], work, log)
    _run([go, "build", "-o", str(work / "jaeger"), MODULE], work, log)
    os.replace(work / "jaeger", cache.product)
    size = cache.product.stat().st_size >> 20
    return {"mib": size}, f"{size} MiB"


def build(cache: Cache) -> Path:
    """Build into the cache unless it is there; one build at a time per key (a second caller waits for it)."""
    return cached_build.make(cache, lambda work, log: _compile(work, cache, log))


def main(argv: list[str]) -> int:
    if argv[:1] == ["versions"]:
        print(JAEGER, MIN_GO)
        return 0
    cache = Cache.here()
    return cached_build.main(argv, cache, lambda: build(cache), Path(__file__).resolve(), BUILD_WAIT_S)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
