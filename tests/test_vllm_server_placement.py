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
    deadline = time.monotonic() + 60
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
def test_every_thread_of_the_tree_is_pinned_and_then_given_back_its_own_cpus(tree) -> None:
    every = os.sched_getaffinity(0)
    first, last = {min(every)}, {max(every)}
    threads = _threads(process_tree(tree.pid))
    bound = threads[-1]  # bound to the last CPU by itself, as vLLM binds its worker's OpenMP threads to cores
    os.sched_setaffinity(bound, last)
    kept: dict[int, set[int]] = {}
    assert pin(tree.pid, first, kept) == len(threads) >= 6
    assert {frozenset(os.sched_getaffinity(t)) for t in threads} == {frozenset(first)}
    assert os.sched_getaffinity(0) == every  # the caller is not moved
    pin(tree.pid, None, kept)
    assert os.sched_getaffinity(bound) == last  # its own binding, not every CPU
    assert {t: os.sched_getaffinity(t) for t in threads if t != bound} == {t: every for t in threads if t != bound}
    pin(tree.pid, last, kept)  # a thread bound inside the CPUs it may use keeps its binding
    assert os.sched_getaffinity(bound) == last


def test_isolated_servers_leave_the_harness_one_cpu_and_otherwise_stay_where_they_are() -> None:
    every = os.sched_getaffinity(0)
    assert server_cpus(isolated=False) is None
    isolated = server_cpus(isolated=True)
    if len(every) == 1:
        assert isolated is None
    else:
        assert isolated is not None and isolated < every and len(every - isolated) == 1
