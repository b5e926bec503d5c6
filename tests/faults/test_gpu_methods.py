"""Real-GPU methods at their transport seam: fake ``nvidia-smi``, fake ``libcudart.so``, fake ``tc``.

No GPU is available here, so these methods are marked ``real hardware only, not verified``; the
tests prove what can be proved without one: the commands sent, the parsing, verify failing when
the mechanism is missing, revert being idempotent and working from the journal record alone.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import pytest

from drill import registry
from drill.api import (
    BackendError,
    Capability,
    FaultContext,
    FaultNotLanded,
    FaultTargets,
    Realism,
    ReplicaRef,
    TargetInfo,
)
from drill.rundir.journal import Journal
from drill.runner.cleanup import clean_run
from drill.runner.reverts import RevertRecord, RevertStack
from tests.faults.gpu_fakes import FAKE_SMI, FAKE_TC, build_fake_cudart, write_tool

HOST_REPLICA = ReplicaRef(name="gpu-host-0", index=0, url="http://127.0.0.1:9")
TARGET = TargetInfo(
    kind="openai",
    base_url="http://127.0.0.1:9",
    replicas=[HOST_REPLICA],
    capabilities=frozenset({Capability.NVIDIA_GPU}),
)


@pytest.fixture()
def fake_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory first on PATH with fake nvidia-smi and tc."""
    directory = tmp_path / "bin"
    write_tool(directory, "nvidia-smi", FAKE_SMI)
    write_tool(directory, "tc", FAKE_TC)
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ['PATH']}")
    return directory


def _fault(kind: str, **params):
    fault_cls = registry.faults.get(kind)
    return fault_cls(fault_cls.Params.model_validate(params))


def _ctx(fault_id: str, replica: ReplicaRef = HOST_REPLICA, target: TargetInfo = TARGET) -> FaultContext:
    return FaultContext(fault_id, target, FaultTargets(replicas=[replica]), timeout_s=20)


def _revert_from_journal(tmp_path: Path, fault, ctx: FaultContext) -> None:
    """Journal the record like the runner, then revert like the watchdog: from the file alone."""
    run_dir = tmp_path / f"run-{ctx.fault_id}"
    run_dir.mkdir()
    journal = Journal(run_dir / "journal.jsonl")
    record = RevertRecord(
        fault_id=ctx.fault_id,
        kind=fault.kind,
        params=fault.params.model_dump(mode="json"),
        target=ctx.target,
        targets=ctx.targets,
        saved=ctx.saved.model_dump(mode="json"),
    )
    RevertStack(journal).push(record, lambda: None)
    journal.close()
    report = clean_run(run_dir, by="watchdog")
    assert report.reverted == [ctx.fault_id], report.failed


def test_gpu_clock_cap_with_nvidia_smi_locks_verifies_resets_and_reverts_from_the_journal(fake_bin, tmp_path):
    fault = _fault("gpu_clock_cap", method="nvidia_smi", fraction=0.5, gpu_indices=[1])
    assert fault.realism_for(fault.params) is Realism.HARDWARE_UNVERIFIED
    assert fault.needs_for(fault.params) == {Capability.NVIDIA_GPU}
    ctx = _ctx("clock")
    ctx.saved = fault.prepare(ctx)
    assert ctx.saved.max_sm_mhz == {"1": 1980.0}
    fault.inject(ctx)
    evidence = fault.verify(ctx)
    assert evidence.observations == {"gpu1.clocks_sm_mhz": 990.0} and "not verified on hardware" in evidence.summary
    fault.revert(ctx)
    with pytest.raises(FaultNotLanded):
        fault.verify(ctx)
    fault.revert(ctx)  # idempotent: -rgc again
    fault.inject(ctx)
    _revert_from_journal(tmp_path, fault, ctx)
    assert json.loads((fake_bin / "smi-state.json").read_text())["locks"] == {}


def test_without_nvidia_smi_the_real_methods_fail_loudly(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    fault = _fault("gpu_clock_cap", method="nvidia_smi", fraction=0.5, gpu_indices=[0])
    with pytest.raises(BackendError, match="nvidia-smi not found") as info:
        fault.prepare(_ctx("no-smi"))
    assert "real NVIDIA GPUs" in info.value.hint


def test_gpu_oom_cuda_hog_on_the_host_holds_memory_verifies_and_is_stopped(fake_bin, tmp_path):
    library = build_fake_cudart(tmp_path / "cuda")
    tag_id = f"hog{uuid.uuid4().hex[:6]}"
    fault = _fault("gpu_oom", method="cuda_hog", gib=2, device=1, cuda_lib=str(library), python="python3")
    ctx = _ctx(tag_id)
    ctx.saved = fault.prepare(ctx)
    try:
        fault.inject(ctx)
        fault.inject(ctx)  # a second start reports the running hog, no double
        evidence = fault.verify(ctx)
        status = ctx.gpus.hog_status(None, f"drill-{tag_id}")
        assert status is not None and status.held == 2 * 2**30 and status.api.startswith("cudart:")
        assert evidence.observations[f"{HOST_REPLICA.name}.used_mib_grown"] == 2048
        fault.revert(ctx)
        assert ctx.gpus.hog_status(None, f"drill-{tag_id}") is None
        assert not _alive(status.pid)
        with pytest.raises(FaultNotLanded, match="no hog running"):
            fault.verify(ctx)
        fault.revert(ctx)  # idempotent
        fault.inject(ctx)
        _revert_from_journal(tmp_path, fault, ctx)
        assert ctx.gpus.hog_status(None, f"drill-{tag_id}") is None
    finally:
        ctx.gpus.stop_memory_hog(None, f"drill-{tag_id}")
        ctx.close()


def test_a_hog_without_any_cuda_library_fails_to_inject(fake_bin, tmp_path):
    fault = _fault("gpu_oom", method="cuda_hog", gib=1, cuda_lib=str(tmp_path / "missing.so"))
    ctx = _ctx(f"nocuda{uuid.uuid4().hex[:6]}")
    ctx.saved = fault.prepare(ctx)
    with pytest.raises(BackendError, match="exited"):
        fault.inject(ctx)
    fault.revert(ctx)


def test_the_hog_frees_the_gpu_by_itself_when_its_lease_runs_out(fake_bin, tmp_path):
    library = build_fake_cudart(tmp_path / "cuda")
    tag = f"drill-lease{uuid.uuid4().hex[:6]}"
    from drill.backends.nvidia import GpuControl

    gpus = GpuControl(timeout_s=20)
    status = gpus.start_memory_hog(None, tag=tag, gib=1, lease_s=1.0, cuda_lib=str(library))
    try:
        deadline = time.monotonic() + 10
        while (gpus.hog_status(None, tag) is not None or _alive(status.pid)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert gpus.hog_status(None, tag) is None and not _alive(status.pid)
    finally:
        gpus.stop_memory_hog(None, tag)


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


def test_nccl_netem_adds_verifies_and_deletes_only_its_own_qdisc(fake_bin, tmp_path):
    fault = _fault("nccl_degradation", method="netem", interface="ib9", latency_ms=5, jitter_ms=1, bandwidth_kbps=1000)
    assert fault.scope == "replicas" and fault.realism_for(fault.params) is Realism.HARDWARE_UNVERIFIED
    ctx = _ctx("netem")
    fault.inject(ctx)
    line = fault.verify(ctx).observations[HOST_REPLICA.name]
    assert "netem" in line and "delay 5ms 1ms" in line and "rate 8000kbit" in line
    fault.revert(ctx)
    with pytest.raises(FaultNotLanded):
        fault.verify(ctx)
    fault.revert(ctx)
    foreign = {"ib9": "qdisc netem 77: dev ib9 root refcnt 2 limit 1000 delay 1ms"}
    (fake_bin / "tc-state.json").write_text(json.dumps(foreign))
    with pytest.raises(BackendError, match="tc exited 2"):
        fault.inject(ctx)  # someone else's root qdisc: the inject fails...
    fault.revert(ctx)  # ...and the revert leaves theirs alone
    assert json.loads((fake_bin / "tc-state.json").read_text()) == foreign
