"""Real-GPU methods through the real Docker engine: the CUDA hog started with ``docker exec`` (against a fake
CUDA runtime and a fake ``nvidia-smi`` mounted into the container) and the NCCL transport-downgrade
container swap (the swap is real; its effect on NCCL needs hardware and is not verified).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from drill import registry
from drill.api import Capability, FaultContext, FaultNotLanded, FaultTargets, ReplicaRef, TargetInfo
from drill.backends.docker import DockerBackend, ensure_empty_image
from drill.rundir.journal import Journal
from drill.runner.cleanup import clean_run
from drill.runner.reverts import RevertRecord, RevertStack
from tests.faults.gpu_fakes import FAKE_SMI, build_fake_cudart, write_tool

pytestmark = [pytest.mark.integration, pytest.mark.docker]

_HOST_DIRS = ("/usr", "/lib", "/lib64", "/bin")


@pytest.fixture()
def gpu_container(tmp_path: Path) -> Iterator[str]:
    """A running container with host binaries, a fake nvidia-smi and a fake libcudart.so under /drillbin."""
    tools = tmp_path / "drillbin"
    write_tool(tools, "nvidia-smi", FAKE_SMI, python="/usr/bin/python3")
    build_fake_cudart(tools)
    binds = {p: {"bind": p, "mode": "ro"} for p in _HOST_DIRS}
    binds[str(tools)] = {"bind": "/drillbin", "mode": "rw"}
    name = f"llm-drill-gpu-{uuid.uuid4().hex[:8]}"
    with DockerBackend(timeout_s=30) as docker:
        docker.run(
            ensure_empty_image(docker),
            ["/bin/sleep", "600"],
            name=name,
            init=True,
            network_mode="host",
            volumes=binds,
            environment={"PATH": "/drillbin:/usr/bin:/bin", "KEEP": "me"},
        )
        try:
            yield name
        finally:
            for found in docker.find(name=name):
                docker.remove(found.id)


def _setup(container: str, kind: str, **params):
    replica = ReplicaRef(name="gpu-0", index=0, url="http://127.0.0.1:9", container=container)
    target = TargetInfo(
        kind="openai",
        base_url="http://127.0.0.1:9",
        replicas=[replica],
        capabilities=frozenset({Capability.NVIDIA_GPU, Capability.DOCKER}),
    )
    fault_cls = registry.faults.get(kind)
    fault = fault_cls(fault_cls.Params.model_validate(params))
    ctx = FaultContext(f"t{uuid.uuid4().hex[:6]}", target, FaultTargets(replicas=[replica]), timeout_s=30)
    return fault, ctx


def _journal_then_clean(tmp_path: Path, fault, ctx: FaultContext) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    journal = Journal(run_dir / "journal.jsonl")
    saved = (ctx.saved or fault.Saved()).model_dump(mode="json")
    record = RevertRecord(
        fault_id=ctx.fault_id,
        kind=fault.kind,
        params=fault.params.model_dump(mode="json"),
        target=ctx.target,
        targets=ctx.targets,
        saved=saved,
    )
    RevertStack(journal).push(record, lambda: None)
    journal.close()
    assert clean_run(run_dir, by="watchdog").reverted == [ctx.fault_id]


def test_cuda_hog_through_docker_exec_outlives_the_exec_and_is_stopped(gpu_container: str, tmp_path: Path) -> None:
    fault, ctx = _setup(
        gpu_container, "gpu_oom", method="cuda_hog", gib=3, cuda_lib="/drillbin/libcudart.so", python="/usr/bin/python3"
    )
    ctx.saved = fault.prepare(ctx)
    assert ctx.saved.used_mib == {"gpu-0": 1024.0}
    fault.inject(ctx)  # docker exec returned: the hog lives on, detached, in the container
    evidence = fault.verify(ctx)
    assert "holds 3.00 GiB" in evidence.summary and evidence.observations["gpu-0.used_mib_grown"] == 3072
    fault.revert(ctx)
    with pytest.raises(FaultNotLanded):
        fault.verify(ctx)
    fault.inject(ctx)
    _journal_then_clean(tmp_path, fault, ctx)
    assert ctx.gpus.hog_status(gpu_container, f"drill-{ctx.fault_id}", python="/usr/bin/python3") is None
    ctx.close()


def test_transport_downgrade_swaps_the_container_and_puts_the_original_back(gpu_container: str, tmp_path: Path) -> None:
    fault, ctx = _setup(gpu_container, "nccl_degradation", method="transport_downgrade")
    with DockerBackend() as docker:
        original = docker.info(gpu_container)
        fault.inject(ctx)
        copy = docker.info(gpu_container)
        env = docker.exec(gpu_container, ["/usr/bin/env"]).output.decode()
        evidence = fault.verify(ctx)
        parked = docker.info(f"{gpu_container}-drill-{ctx.fault_id}")
        fault.revert(ctx)
        back = docker.info(gpu_container)
        fault.revert(ctx)  # idempotent
        assert docker.find(name=f"{gpu_container}-drill-") == []
    assert copy.id != original.id and copy.labels["llm-drill.fault"] == f"drill-{ctx.fault_id}"
    assert all(v in env for v in ("NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1", "NCCL_NVLS_ENABLE=0", "KEEP=me"))
    assert "NCCL_P2P_DISABLE=1" in evidence.summary or "NCCL_P2P_DISABLE" in str(evidence.observations)
    assert str(parked.state) == "exited"
    assert back.id == original.id and str(back.state) == "running"
    with pytest.raises(FaultNotLanded):
        fault.verify(ctx)


def test_transport_downgrade_is_restored_from_any_half_done_swap_and_from_the_journal(
    gpu_container: str, tmp_path: Path
) -> None:
    from drill.backends.nccl import NcclControl

    fault, ctx = _setup(gpu_container, "nccl_degradation", method="transport_downgrade")
    tag = f"drill-{ctx.fault_id}"
    with DockerBackend() as docker:
        original = docker.info(gpu_container).id
        docker.client.api.rename(original, f"{gpu_container}-{tag}")  # crashed right after parking
        fault.revert(ctx)
        assert docker.info(gpu_container).id == original
        fault.inject(ctx)
        _journal_then_clean(tmp_path, fault, ctx)
        restored = docker.info(gpu_container)
        assert restored.id == original and str(restored.state) == "running"
        assert NcclControl(docker=lambda: docker).applied_env(gpu_container, tag) is None
