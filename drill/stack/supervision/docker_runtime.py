"""``runtime: docker``: one container per replica (with its TP ranks and PP stages inside).

Follows stack-contracts.md §2 and docs/dependencies.md §3: an empty-rootfs image
(:func:`drill.backends.docker.ensure_empty_image`), host networking (the bridge is off on the
test engine, and Toxiproxy proxies reach the replica at the same addresses as locally),
``init=True`` (so SIGTERM reaches Python and stop/restart are fast), ``restart_policy:
on-failure`` (a crashed replica comes back by itself), and host directories bind-mounted
read-only: ``/usr``, ``/lib``, ``/lib64``, ``/bin``, ``/etc``, the Python installation, the
virtualenv and the source tree. The stack's run directory (launches, ledgers, logs) is mounted
read-write at the same path. The replica runs under :mod:`drill.stack.supervision.container_entry`, which
watches the supervisor's lifeline socket so no container outlives the supervisor.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import drill
from drill.backends.docker import ContainerInfo, DockerBackend, ensure_empty_image
from drill.stack.supervision.stack_plan import CONTAINER_LABEL, StackPlan, container_name

__all__ = ["host_binds", "remove_stack_containers", "replica_command", "start_replica_container"]

_SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/bin", "/etc")


def _source_root() -> Path:
    return Path(drill.__file__).resolve().parent.parent


def host_binds(run_dir: Path) -> dict[str, dict[str, str]]:
    """Docker ``volumes`` for a replica container: host directories at the same paths."""
    read_only = [*_SYSTEM_DIRS, os.path.realpath(sys.base_prefix), sys.prefix, str(_source_root())]
    binds = {path: {"bind": path, "mode": "ro"} for path in read_only if os.path.exists(path)}
    binds[str(run_dir)] = {"bind": str(run_dir), "mode": "rw"}
    return binds


def replica_command(plan: StackPlan, index: int) -> list[str]:
    """The container's command: the lifeline wrapper around ``python -m drill.stack.replica.api_server``."""
    assert plan.lifeline_port is not None
    lifeline = f"{plan.router_launch.host}:{plan.lifeline_port}"
    return [
        plan.python,
        "-m",
        "drill.stack.supervision.container_entry",
        "--lifeline",
        lifeline,
        "--",
        plan.python,
        "-m",
        "drill.stack.replica.api_server",
        "--launch",
        str(plan.launch_path(f"replica-{index}")),
    ]


def start_replica_container(backend: DockerBackend, plan: StackPlan, index: int) -> ContainerInfo:
    """Create and start replica ``index``'s container (removing a stale one of the same name)."""
    name = container_name(plan.state.name, index)
    backend.remove(name)
    return backend.run(
        ensure_empty_image(backend),
        replica_command(plan, index),
        name=name,
        init=True,
        network_mode="host",
        volumes=host_binds(plan.run_dir),
        working_dir=str(_source_root()),
        labels={CONTAINER_LABEL: plan.state.name, "llm-drill.replica": str(index)},
        restart_policy={"Name": "on-failure"},
        environment={"PYTHONUNBUFFERED": "1", "HOME": "/root", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        stdout=True,
        stderr=True,
    )


def remove_stack_containers(backend: DockerBackend, stack: str) -> int:
    """Force-remove every container labelled with ``stack``; returns how many there were."""
    found = backend.find(labels={CONTAINER_LABEL: stack})
    for info in found:
        backend.remove(info.id)
    return len(found)
