"""NCCL link degradation on real multi-GPU hosts: netem on the NCCL interface, transport downgrade.

**Not verified on hardware** (no GPU here). Two mechanisms, after docs/fault-methods.md §2:

* **netem** on the network interface NCCL's socket transport uses (``NCCL_SOCKET_IFNAME``):
  ``tc qdisc add dev <if> root handle <h>: netem delay <ms>ms <jitter>ms rate <kbit>kbit``, run
  in the replica's container (``docker exec``; the container needs ``CAP_NET_ADMIN`` and ``tc``)
  or on this host (root). It slows only traffic that goes through that interface as IP: NCCL's
  ``NET/Socket`` transport, not NVLink, P2P/SHM or InfiniBand verbs. The qdisc handle is derived
  from the fault id (:func:`netem_handle`), and removal deletes only a netem qdisc with that
  handle. On a host-network container the interface is the host's: the whole host is affected.
* **transport downgrade**: the serving container is recreated with ``NCCL_P2P_DISABLE=1``,
  ``NCCL_SHM_DISABLE=1``, ``NCCL_NVLS_ENABLE=0`` (and whatever else is asked) and started, so
  NCCL falls back to slower transports at its next init. The original container is stopped and
  renamed ``<name>-<tag>`` (a fault's tag is ``drill-<fault id>``); the new one has the original's
  name, image, command, host config and the label ``llm-drill.fault=<tag>``. :meth:`NcclControl.restore` removes the
  new one, renames the original back and starts it. Every step is idempotent, so a restore after a crash
  at any point of the swap puts the original back. On hardware, ``NCCL_DEBUG=INFO`` logs show the
  transport (``via P2P/CUMEM`` becomes ``via SHM`` or ``via NET/Socket``). The container swap
  itself is tested against the real Docker engine; the NCCL effect is not. Limits: the copy joins
  only the network of ``HostConfig.NetworkMode`` (others the original was connected to are not
  reconnected); a container with ``AutoRemove`` is refused (stopping it would delete it).

Every call is bounded by ``timeout_s``; failures raise :class:`drill.errors.NetemError` (netem)
or :class:`drill.errors.DockerError` (container swap).
"""

from __future__ import annotations

import shutil
import subprocess
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from drill.errors import DockerError, NetemError

if TYPE_CHECKING:  # pragma: no cover
    from drill.backends.docker import DockerBackend

__all__ = ["FAULT_LABEL", "NcclControl", "NetemSpec", "netem_handle"]

DEFAULT_TIMEOUT_S = 10.0
FAULT_LABEL = "llm-drill.fault"
_STOP_GRACE_S = 30


def netem_handle(tag: str) -> str:
    """A tc major handle (hex, ``1``–``fff0``) derived from ``tag``: the same for the same fault id."""
    return format(zlib.crc32(tag.encode()) % 0xFFF0 + 1, "x")


@dataclass(frozen=True)
class NetemSpec:
    """What netem adds: delay and jitter (ms), a rate cap (kbit/s, 0 = none), packet loss (%)."""

    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    rate_kbit: int = 0
    loss_pct: float = 0.0

    def args(self) -> list[str]:
        """The ``netem`` arguments of ``tc qdisc add``."""
        out: list[str] = []
        if self.delay_ms or self.jitter_ms:
            out += ["delay", f"{self.delay_ms:g}ms"] + ([f"{self.jitter_ms:g}ms"] if self.jitter_ms else [])
        if self.loss_pct:
            out += ["loss", f"{self.loss_pct:g}%"]
        if self.rate_kbit:
            out += ["rate", f"{self.rate_kbit}kbit"]
        return out


class NcclControl:
    """netem on an interface (host or container) and the NCCL transport-downgrade container swap."""

    def __init__(
        self,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        docker: Callable[[], DockerBackend] | None = None,
        tc: str = "tc",
    ) -> None:
        self.timeout_s = timeout_s
        self._docker = docker
        self.tc = tc

    def close(self) -> None:
        """Nothing to release (the Docker connection belongs to the fault context)."""

    # -- netem -----------------------------------------------------------------------------------
    def add_netem(
        self,
        container: str | None,
        interface: str,
        tag: str,
        *,
        delay_ms: float = 0.0,
        jitter_ms: float = 0.0,
        rate_kbit: int = 0,
        loss_pct: float = 0.0,
    ) -> None:
        """Put a netem qdisc with the handle of ``tag`` at the root of ``interface`` (units as :class:`NetemSpec`)."""
        spec = NetemSpec(delay_ms, jitter_ms, rate_kbit, loss_pct)
        args = ["qdisc", "add", "dev", interface, "root", "handle", f"{netem_handle(tag)}:", "netem", *spec.args()]
        self._tc(container, args, f"add netem on {interface}")

    def netem_line(self, container: str | None, interface: str, tag: str) -> str | None:
        """The ``tc qdisc show`` line of our netem qdisc on ``interface``; None when it is not there."""
        out = self._tc(container, ["qdisc", "show", "dev", interface], f"show qdiscs of {interface}")
        mine = f"qdisc netem {netem_handle(tag)}:"
        return next((line.strip() for line in out.splitlines() if line.strip().startswith(mine)), None)

    def remove_netem(self, container: str | None, interface: str, tag: str) -> bool:
        """Delete our netem qdisc; False when it was not there (nothing else is touched)."""
        if self.netem_line(container, interface, tag) is None:
            return False
        self._tc(
            container,
            ["qdisc", "del", "dev", interface, "root", "handle", f"{netem_handle(tag)}:"],
            f"delete netem on {interface}",
        )
        return True

    def _tc(self, container: str | None, args: list[str], operation: str) -> str:
        if container is not None:
            if self._docker is None:
                raise NetemError(f"{operation}: no Docker backend for container {container}", operation=operation)
            result = self._docker().exec(container, [self.tc, *args])
            return _checked(result.exit_code, result.output.decode(errors="replace"), operation)
        if shutil.which(self.tc) is None:
            raise NetemError(
                f"{operation}: {self.tc} not found",
                operation=operation,
                hint="install iproute2; netem also needs the sch_netem kernel module",
            )
        try:
            done = subprocess.run([self.tc, *args], capture_output=True, text=True, timeout=self.timeout_s)
        except (OSError, subprocess.SubprocessError) as exc:
            raise NetemError(f"{operation}: {exc}", operation=operation) from exc
        return _checked(done.returncode, done.stdout + done.stderr, operation)

    # -- transport downgrade ---------------------------------------------------------------------
    def restart_with_env(self, container: str, tag: str, env: dict[str, str]) -> str:
        """Swap ``container`` for a copy with ``env`` added, and start it; returns the new id.

        Idempotent: when the swap was already made for ``tag`` it only makes sure the copy runs.
        Raises DockerError (and changes nothing) for a container with AutoRemove.
        """
        api, parked = self._api(), _parked(container, tag)
        with _docker_errors(f"restart {container} with {', '.join(env)}"):
            current = _inspect(api, container)
            if current is not None and _labels(current).get(FAULT_LABEL) == tag:
                api.start(current["Id"])
                return current["Id"]
            if _inspect(api, parked) is None:
                self._park(api, container, parked)
            original = api.inspect_container(parked)
            created = api.create_container(name=container, **_copy_of(original, env, tag))
            api.start(created["Id"])
            return created["Id"]

    def _park(self, api: Any, container: str, parked: str) -> None:
        attrs = api.inspect_container(container)
        if attrs["HostConfig"].get("AutoRemove"):
            raise DockerError(
                f"{container} has AutoRemove set: stopping it would delete it, so it could not be restored",
                operation="restart with env",
                hint="use the netem method instead",
            )
        api.rename(attrs["Id"], parked)
        api.stop(attrs["Id"], timeout=_STOP_GRACE_S)

    def applied_env(self, container: str, tag: str) -> dict[str, str] | None:
        """The environment of the running copy made for ``tag``; None when no such copy runs."""
        with _docker_errors(f"inspect {container}"):
            attrs = _inspect(self._api(), container)
        if attrs is None or _labels(attrs).get(FAULT_LABEL) != tag or not attrs["State"].get("Running"):
            return None
        return dict(item.split("=", 1) for item in attrs["Config"].get("Env") or [] if "=" in item)

    def restore(self, container: str, tag: str) -> bool:
        """Remove the copy made for ``tag`` and put the original back, running. False when nothing was swapped."""
        api, parked = self._api(), _parked(container, tag)
        with _docker_errors(f"restore {container}"):
            current = _inspect(api, container)
            ours = current is not None and _labels(current).get(FAULT_LABEL) == tag
            if ours and current is not None:
                api.remove_container(current["Id"], force=True)
            if _inspect(api, parked) is None:
                return ours
            if ours or current is None:
                api.rename(parked, container)
                api.start(container)
                return True
        raise DockerError(
            f"cannot restore {container}: another container took its name while {parked} was parked",
            operation="restore",
            hint=f"remove or rename {container}, then run `drill cleanup` again",
        )

    def _api(self) -> Any:
        if self._docker is None:
            raise DockerError("no Docker backend", operation="container swap")
        return self._docker().client.api


def _checked(code: int, output: str, operation: str) -> str:
    if code == 0:
        return output
    hint = "netem needs the sch_netem kernel module and CAP_NET_ADMIN" if "qdisc" in operation else None
    raise NetemError(f"{operation}: tc exited {code}: {output.strip()[-300:]}", operation=operation, hint=hint)


def _parked(container: str, tag: str) -> str:
    return f"{container}-{tag}"


def _labels(attrs: dict) -> dict[str, str]:
    return attrs.get("Config", {}).get("Labels") or {}


def _inspect(api: Any, name: str) -> dict | None:
    # lazy: the Docker SDK (~0.3 s to import) loads only when a container is faulted
    import docker.errors

    try:
        return api.inspect_container(name)
    except docker.errors.NotFound:
        return None


def _copy_of(attrs: dict, env: dict[str, str], tag: str) -> dict[str, Any]:
    """``create_container`` arguments for a copy of ``attrs`` with ``env`` set and the fault label."""
    config = attrs["Config"]
    kept = [e for e in config.get("Env") or [] if e.split("=", 1)[0] not in env]
    return {
        "image": config["Image"],
        "command": config.get("Cmd"),
        "entrypoint": config.get("Entrypoint"),
        "environment": kept + [f"{k}={v}" for k, v in env.items()],
        "working_dir": config.get("WorkingDir") or None,
        "user": config.get("User") or None,
        "labels": {**_labels(attrs), FAULT_LABEL: tag},
        "stop_signal": config.get("StopSignal"),
        "tty": bool(config.get("Tty")),
        "detach": True,
        "host_config": attrs["HostConfig"],
    }


@contextmanager
def _docker_errors(operation: str) -> Iterator[None]:
    # lazy: the Docker SDK (~0.3 s to import) loads only when a container is faulted
    import docker.errors
    import requests.exceptions

    try:
        yield
    except docker.errors.APIError as exc:
        raise DockerError(
            f"{operation}: Docker engine said {exc.status_code}: {exc.explanation}", operation=operation
        ) from exc
    except (requests.exceptions.RequestException, docker.errors.DockerException) as exc:
        raise DockerError(f"{operation}: {exc}", operation=operation, hint="is dockerd running and answering?") from exc
