"""Where tests/vllm's servers run (tests/vllm/servers.py: ``process_tree``, ``pin``, ``server_cpus``), on a real
process tree: a shell with children and a thread-starting Python under it, as ``drill supervise`` has ``vllm serve``
and its engine processes under it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.vllm.servers import pin, process_tree, server_cpus

THREADS = (
    "import threading, time\n"
    "[threading.Thread(target=time.sleep, args=(60,), daemon=True).start() for _ in range(3)]\n"
    "time.sleep(60)"
)


def _threads(pids: list[int]) -> list[int]:
    return [int(t.name) for pid in pids for t in Path(f"/proc/{pid}/task").iterdir()]


@pytest.fixture
def tree():
    root = subprocess.Popen(["sh", "-c", f"{sys.executable} -c '{THREADS}' & sleep 60 & wait"], start_new_session=True)
    deadline = time.monotonic() + 10
    while len(_threads(process_tree(root.pid))) < 1 + 4 + 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    yield root
    os.killpg(root.pid, 9)
    root.wait()


def test_the_tree_holds_the_root_and_every_descendant_and_no_other_process(tree) -> None:
    pids = process_tree(tree.pid)
    assert pids[0] == tree.pid and len(pids) == 3, pids
    assert os.getpid() not in pids


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="placement needs two CPUs to show")
def test_every_thread_of_the_tree_is_pinned_and_then_let_go(tree) -> None:
    every = os.sched_getaffinity(0)
    one = {min(every)}
    threads = _threads(process_tree(tree.pid))
    assert pin(tree.pid, one) == len(threads) >= 6
    assert {frozenset(os.sched_getaffinity(t)) for t in threads} == {frozenset(one)}
    assert os.sched_getaffinity(0) == every  # the caller is not moved
    pin(tree.pid, every)
    assert {frozenset(os.sched_getaffinity(t)) for t in threads} == {frozenset(every)}


def test_isolated_servers_leave_the_harness_one_cpu_and_otherwise_get_every_cpu() -> None:
    every = os.sched_getaffinity(0)
    assert server_cpus(isolated=False) == every
    isolated = server_cpus(isolated=True)
    if len(every) == 1:
        assert isolated == every
    else:
        assert isolated < every and len(every - isolated) == 1
