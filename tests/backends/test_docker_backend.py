"""The Docker backend against the real engine: lifecycle, faults, lookups, errors, time bounds."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator

import docker
import pytest

from drill.backends.docker import ContainerState, DockerBackend, ensure_empty_image
from drill.errors import DockerError

pytestmark = [pytest.mark.integration, pytest.mark.docker]

HOST_BINDS = {path: {"bind": path, "mode": "ro"} for path in ("/usr", "/lib", "/lib64", "/bin", "/etc")}


@pytest.fixture(scope="module")
def backend() -> Iterator[DockerBackend]:
    with DockerBackend() as instance:
        yield instance


@pytest.fixture()
def run_label(backend: DockerBackend) -> Iterator[str]:
    """A label value unique to the test; every container carrying it is removed afterwards."""
    value = uuid.uuid4().hex[:10]
    yield value
    for info in backend.find(labels={"llm-drill.test": value}):
        backend.remove(info.id)


@pytest.fixture()
def sleeper(backend: DockerBackend, run_label: str) -> str:
    """A running container (``init=True``, host binaries read-only) that sleeps; returns its name."""
    image = ensure_empty_image(backend)
    name = f"llm-drill-test-{run_label}"
    backend.run(
        image,
        ["/usr/bin/sleep", "600"],
        name=name,
        init=True,
        network_mode="host",
        volumes=HOST_BINDS,
        labels={"llm-drill.test": run_label},
    )
    backend.wait_for_state(name, ContainerState.RUNNING)
    return name


def test_pause_and_unpause(backend: DockerBackend, sleeper: str) -> None:
    backend.pause(sleeper)
    assert backend.info(sleeper).state is ContainerState.PAUSED
    backend.unpause(sleeper)
    assert backend.info(sleeper).state is ContainerState.RUNNING


def test_kill_then_restart(backend: DockerBackend, sleeper: str) -> None:
    backend.kill(sleeper)
    dead = backend.wait_for_state(sleeper, ContainerState.EXITED)
    assert dead.exit_code == 137 and dead.pid == 0
    backend.restart(sleeper)
    alive = backend.wait_for_state(sleeper, ContainerState.RUNNING)
    assert alive.pid > 0


def test_stop_with_init_does_not_wait_the_grace_period(backend: DockerBackend, sleeper: str) -> None:
    started = time.monotonic()
    backend.stop(sleeper, grace_s=10)
    assert time.monotonic() - started < 5.0  # init forwards SIGTERM; no 10 s SIGKILL wait
    assert backend.info(sleeper).state is ContainerState.EXITED
    backend.start(sleeper)
    assert backend.wait_for_state(sleeper, ContainerState.RUNNING).state is ContainerState.RUNNING


def test_cpu_limit_is_applied_and_removed(backend: DockerBackend, sleeper: str) -> None:
    backend.set_cpu_limit(sleeper, 0.1)
    assert backend.info(sleeper).cpu_quota_us == 10_000
    quota = backend.exec(sleeper, ["/usr/bin/cat", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"])
    assert quota.exit_code == 0 and quota.output.strip() == b"10000"
    backend.clear_cpu_limit(sleeper)
    backend.clear_cpu_limit(sleeper)  # idempotent
    assert backend.info(sleeper).cpu_quota_us in (0, -1)
    with pytest.raises(DockerError):
        backend.set_cpu_limit(sleeper, 0)


def test_exec_returns_exit_code_and_output(backend: DockerBackend, sleeper: str) -> None:
    result = backend.exec(sleeper, ["/bin/sh", "-c", "echo hi; exit 3"])
    assert result.exit_code == 3 and result.output == b"hi\n"


def test_find_by_name_and_label(backend: DockerBackend, sleeper: str, run_label: str) -> None:
    by_label = backend.find(labels={"llm-drill.test": run_label})
    assert [c.name for c in by_label] == [sleeper]
    assert by_label[0].labels["llm-drill.test"] == run_label
    assert [c.name for c in backend.find(name=sleeper)] == [sleeper]
    assert backend.find(labels={"llm-drill.test": "no-such-run"}) == []


def test_wait_for_state_times_out_with_last_state(backend: DockerBackend, sleeper: str) -> None:
    started = time.monotonic()
    with pytest.raises(DockerError) as info:
        backend.wait_for_state(sleeper, ContainerState.PAUSED, timeout_s=0.3)
    assert time.monotonic() - started < 3.0
    assert "is running after 0.3s" in str(info.value)


def test_errors_carry_hints(backend: DockerBackend, sleeper: str) -> None:
    with pytest.raises(DockerError) as missing:
        backend.pause("llm-drill-no-such-container")
    assert "no such container" in str(missing.value) and "find()" in (missing.value.hint or "")
    backend.kill(sleeper)
    backend.wait_for_state(sleeper, ContainerState.EXITED)
    with pytest.raises(DockerError) as conflict:
        backend.pause(sleeper)
    assert "409" in str(conflict.value) and "wrong state" in (conflict.value.hint or "")


def test_remove_is_idempotent(backend: DockerBackend, sleeper: str) -> None:
    assert backend.remove(sleeper) is True
    assert backend.remove(sleeper) is False
    assert backend.find(name=sleeper) == []


def test_image_import_is_idempotent(backend: DockerBackend) -> None:
    first = ensure_empty_image(backend)
    assert ensure_empty_image(backend) == first
    assert backend.client.images.get(first).attrs["Size"] < 1_000_000


def test_hung_engine_is_time_bounded() -> None:
    with socket.socket() as listener:  # accepts into the backlog, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        client = docker.DockerClient(base_url=f"tcp://127.0.0.1:{listener.getsockname()[1]}", timeout=1, version="1.41")
        started = time.monotonic()
        with pytest.raises(DockerError) as info:
            DockerBackend(client=client, timeout_s=1)
        client.close()
    assert time.monotonic() - started < 5.0
    assert "did not answer within 1s" in str(info.value)
