"""Container faults and lifecycle through the Docker SDK, every call time-bounded.

Facts this module relies on (docs/dependencies.md §3, docker 7.2 → engine 20.10, API 1.41):

* ``pause``/``unpause`` take ~30 ms; requests sent while paused are answered after unpause;
* ``update(cpu_quota=…, cpu_period=100000)`` acts at once; ``cpu_quota=-1`` removes the cap;
* without ``init=True`` a Python PID 1 ignores SIGTERM, so stop/restart wait their full timeout;
* ``container.wait(timeout=…)`` raises ``requests`` errors, not ``docker.errors`` ones;
* vfs copies the whole image per container, so the stack's image is an *empty* rootfs imported
  from a tarball, with host directories bind-mounted read-only (:func:`ensure_empty_image`).

Every failure raises :class:`drill.errors.DockerError` with the operation and a hint; the
engine's HTTP client timeout (``timeout_s``) bounds each call, and stop/restart add their own
grace period to it as the SDK does.
"""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

import docker
import docker.errors
import requests.exceptions
from docker.models.containers import Container

from drill.errors import DockerError

__all__ = [
    "ContainerInfo",
    "ContainerState",
    "DockerBackend",
    "ExecResult",
    "ensure_empty_image",
]

DEFAULT_TIMEOUT_S = 10.0
CPU_PERIOD_US = 100_000
T = TypeVar("T")


class ContainerState(StrEnum):
    """``State.Status`` of a container as the engine reports it."""

    CREATED = "created"
    RUNNING = "running"
    PAUSED = "paused"
    RESTARTING = "restarting"
    REMOVING = "removing"
    EXITED = "exited"
    DEAD = "dead"


@dataclass(frozen=True)
class ContainerInfo:
    """A snapshot of one container: ``pid`` is the host pid of its init (0 when not running)."""

    id: str
    name: str
    state: ContainerState
    labels: dict[str, str] = field(default_factory=dict)
    pid: int = 0
    exit_code: int | None = None
    restart_count: int = 0
    cpu_quota_us: int = 0


@dataclass(frozen=True)
class ExecResult:
    """What ``exec`` returned: the command's exit code and its combined stdout+stderr."""

    exit_code: int
    output: bytes


def _info(container: Container) -> ContainerInfo:
    attrs = container.attrs
    state = attrs.get("State", {})
    return ContainerInfo(
        id=container.id,
        name=container.name,
        state=ContainerState(state.get("Status", "dead")),
        labels=dict(attrs.get("Config", {}).get("Labels") or {}),
        pid=int(state.get("Pid") or 0),
        exit_code=state.get("ExitCode"),
        restart_count=int(attrs.get("RestartCount") or 0),
        cpu_quota_us=int(attrs.get("HostConfig", {}).get("CpuQuota") or 0),
    )


@contextmanager
def _translated(operation: str, timeout_s: float) -> Iterator[None]:
    """Turn docker/requests exceptions raised inside into DockerError (the one boundary)."""
    try:
        yield
    except docker.errors.NotFound as exc:
        raise DockerError(
            f"{operation}: no such container or image ({exc.explanation})",
            hint="it may have been removed; list containers with DockerBackend.find()",
            operation=operation,
        ) from exc
    except docker.errors.APIError as exc:
        hint = (
            "the container is in the wrong state for this (see DockerBackend.info())"
            if exc.status_code == 409
            else None
        )
        raise DockerError(
            f"{operation}: Docker engine said {exc.status_code}: {exc.explanation}", hint=hint, operation=operation
        ) from exc
    except (requests.exceptions.Timeout, requests.exceptions.ConnectionError) as exc:
        raise DockerError(
            f"{operation}: the Docker engine did not answer within {timeout_s:g}s",
            hint="is dockerd overloaded or hung? `docker ps` should answer",
            operation=operation,
        ) from exc
    except docker.errors.DockerException as exc:
        raise DockerError(
            f"{operation}: {exc}", hint="is dockerd running? (`./dev test` starts one)", operation=operation
        ) from exc


class DockerBackend:
    """Acts on containers by name or id. One instance holds one engine connection.

    ``timeout_s`` bounds each HTTP call to the engine. Raises DockerError from the constructor
    when the engine cannot be reached.
    """

    def __init__(self, *, timeout_s: float = DEFAULT_TIMEOUT_S, client: docker.DockerClient | None = None) -> None:
        self.timeout_s = timeout_s
        with _translated("connect to the Docker engine", timeout_s):
            self.client = client or docker.from_env(timeout=max(1, round(timeout_s)))
            self.client.ping()

    def close(self) -> None:
        """Close the engine connection. Called once when done."""
        self.client.close()

    def __enter__(self) -> DockerBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- lookup ------------------------------------------------------------------------------
    def find(
        self, *, name: str | None = None, labels: dict[str, str] | None = None, include_stopped: bool = True
    ) -> list[ContainerInfo]:
        """Containers whose name contains ``name`` and that carry every label in ``labels``."""
        filters: dict[str, Any] = {}
        if name:
            filters["name"] = name
        if labels:
            filters["label"] = [f"{k}={v}" for k, v in labels.items()]
        with _translated("list containers", self.timeout_s):
            found = self.client.containers.list(all=include_stopped, filters=filters)
        return [_info(c) for c in found]

    def info(self, container: str) -> ContainerInfo:
        """A fresh snapshot of one container (by name or id)."""
        return self._call(container, "inspect", lambda c: _info(c))

    # -- faults and lifecycle -----------------------------------------------------------------
    def pause(self, container: str) -> None:
        """Freeze every process of the container (cgroup freezer)."""
        self._call(container, "pause", lambda c: c.pause())

    def unpause(self, container: str) -> None:
        """Thaw a paused container."""
        self._call(container, "unpause", lambda c: c.unpause())

    def kill(self, container: str, signal: str = "SIGKILL") -> None:
        """Send ``signal`` to the container's init (with ``init=True``, forwarded to the process)."""
        self._call(container, f"kill ({signal})", lambda c: c.kill(signal=signal))

    def stop(self, container: str, *, grace_s: int = 5) -> None:
        """SIGTERM, then SIGKILL after ``grace_s`` seconds."""
        self._call(container, "stop", lambda c: c.stop(timeout=grace_s))

    def start(self, container: str) -> None:
        """Start a created or exited container."""
        self._call(container, "start", lambda c: c.start())

    def restart(self, container: str, *, grace_s: int = 5) -> None:
        """Stop (``grace_s`` before SIGKILL) and start again."""
        self._call(container, "restart", lambda c: c.restart(timeout=grace_s))

    def set_cpu_limit(self, container: str, cpus: float) -> None:
        """Cap the container at ``cpus`` CPUs (0.1 = 10 % of one core), effective at once."""
        if cpus <= 0:
            raise DockerError(f"set cpu limit: cpus must be > 0, got {cpus}", operation="set cpu limit")
        quota = max(1000, round(cpus * CPU_PERIOD_US))
        self._call(container, f"set cpu limit {cpus:g}", lambda c: c.update(cpu_quota=quota, cpu_period=CPU_PERIOD_US))

    def clear_cpu_limit(self, container: str) -> None:
        """Remove the CPU cap (``cpu_quota=-1``); idempotent."""
        self._call(container, "clear cpu limit", lambda c: c.update(cpu_quota=-1))

    def exec(self, container: str, command: list[str]) -> ExecResult:
        """Run ``command`` inside the container and wait for it (bounded by ``timeout_s``)."""
        result = self._call(container, f"exec {command[:1]}", lambda c: c.exec_run(command))
        return ExecResult(exit_code=int(result.exit_code), output=bytes(result.output or b""))

    def remove(self, container: str, *, missing_ok: bool = True) -> bool:
        """Force-remove a container (killing it). Returns False when it did not exist."""
        try:
            self._call(container, "remove", lambda c: c.remove(force=True))
        except DockerError as exc:
            if missing_ok and isinstance(exc.__cause__, docker.errors.NotFound):
                return False
            if missing_ok and "already in progress" in str(exc):
                return True
            raise
        return True

    def wait_for_state(
        self,
        container: str,
        states: set[ContainerState] | ContainerState,
        *,
        timeout_s: float = 10.0,
        poll_s: float = 0.05,
    ) -> ContainerInfo:
        """Poll until the container is in one of ``states``; returns that snapshot.

        Raises DockerError when ``timeout_s`` passes first (with the last state seen).
        """
        wanted = {states} if isinstance(states, ContainerState) else set(states)
        deadline = time.monotonic() + timeout_s
        while True:
            info = self.info(container)
            if info.state in wanted:
                return info
            if time.monotonic() >= deadline:
                raise DockerError(
                    f"wait for state: {container} is {info.state} after {timeout_s:g}s, wanted {sorted(wanted)}",
                    hint="see `docker logs " + container + "`",
                    operation="wait for state",
                )
            time.sleep(poll_s)

    def run(self, image: str, command: list[str], *, name: str, **kwargs: Any) -> ContainerInfo:
        """Create and start a detached container (``kwargs`` as for ``containers.run``)."""
        with _translated(f"run container {name}", self.timeout_s):
            container = self.client.containers.run(image, command, name=name, detach=True, **kwargs)
            container.reload()
        return _info(container)

    def _call(self, container: str, operation: str, action: Callable[[Container], T]) -> T:
        with _translated(f"{operation} {container}", self.timeout_s):
            handle = self.client.containers.get(container)
            return action(handle)


def _empty_rootfs() -> bytes:
    """A tarball of empty top-level directories: mount points for the read-only host binds."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, mode in (
            ("tmp", 0o1777),
            ("proc", 0o555),
            ("sys", 0o555),
            ("dev", 0o755),
            ("etc", 0o755),
            ("run", 0o755),
            ("root", 0o700),
        ):
            entry = tarfile.TarInfo(name)
            entry.type, entry.mode, entry.mtime = tarfile.DIRTYPE, mode, 0
            tar.addfile(entry)
    return buffer.getvalue()


def ensure_empty_image(backend: DockerBackend, repository: str = "llm-drill-host", tag: str = "v1") -> str:
    """Import (once) an image with an empty rootfs and return its reference ``repository:tag``.

    Containers from it run host binaries through read-only bind mounts (docs/dependencies.md §3):
    vfs storage copies an image per container, so an empty one costs nothing.
    """
    reference = f"{repository}:{tag}"
    with _translated(f"import image {reference}", backend.timeout_s):
        try:
            backend.client.images.get(reference)
        except docker.errors.ImageNotFound:
            backend.client.api.import_image_from_data(_empty_rootfs(), repository=repository, tag=tag)
    return reference
