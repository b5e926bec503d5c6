"""``kind: openai``: an external OpenAI-compatible serving stack (vLLM, SGLang, TGI, ...).

The harness attaches to what is already running; it starts nothing and tears
nothing down, unless ``start_command`` is given for the cold-start phase. The
``replicas`` list tells faults how each replica can be reached: its URL, its
Toxiproxy proxy, its container, its PID file or process name.

.. code-block:: yaml

    target:
      kind: openai
      config:
        url: http://127.0.0.1:8000
        toxiproxy_url: http://127.0.0.1:8474
        replicas:
          - {name: vllm-0, url: http://127.0.0.1:8001, container: vllm-0, proxy: vllm-0}
          - {name: vllm-1, url: http://127.0.0.1:8002, pid_file: /run/vllm-1.pid}
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from urllib.parse import urlsplit

import httpx
from pydantic import Field

from drill.api import Capability, ReplicaRef, Target, TargetInfo
from drill.errors import TargetError
from drill.spec.validation import SpecModel
from drill.units import Duration

__all__ = ["OpenAITarget", "OpenAITargetParams"]


class ReplicaConfig(SpecModel):
    name: str
    url: str
    metrics_url: str | None = None
    container: str | None = None
    pid_file: str | None = None
    process_name: str | None = None
    proxy: str | None = None


class OpenAITargetParams(SpecModel):
    url: str = Field(pattern=r"^https?://")
    model: str | None = None
    #: Headers sent with every request (load, probes, replay), e.g. ``Authorization: Bearer ${VLLM_API_KEY}``;
    #: ``${NAME}`` is read from the environment at start, so the drill file need not hold the secret.
    #: Credentials never reach a stored sample, a log, ``resolved.json`` or a report.
    headers: dict[str, str] = Field(default_factory=dict)
    #: Shorthand for ``Authorization: Bearer <api_key>`` (vLLM's ``--api-key``); ``${NAME}`` as in headers.
    api_key: str | None = None
    replicas: list[ReplicaConfig] = Field(default_factory=list)
    toxiproxy_url: str | None = None
    metrics_urls: dict[str, str] | None = None  # default: <url>/metrics and each replica's metrics_url
    health_path: str = "/health"
    start_command: list[str] | None = None  # run at cold start (e.g. ["docker", "start", "vllm"])
    supervised: bool = False  # something restarts a replica that exits
    gpus: bool = False  # real NVIDIA GPUs (nvidia-smi/NVML) are reachable for GPU faults
    startup_timeout: Duration = 600.0


def _host(url: str) -> str:
    return urlsplit(url).hostname or ""


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _expand(value: str, where: str) -> str:
    """``${NAME}`` replaced by the environment variable NAME; an unset one is an error naming where."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise TargetError(
                f"target.config.{where}: the environment variable {name} is not set",
                hint=f"export {name}=... before the run",
            )
        return os.environ[name]

    return _ENV_REF.sub(one, value)


class OpenAITarget(Target):
    kind = "openai"
    Params = OpenAITargetParams
    params: OpenAITargetParams

    @classmethod
    # override with its own Params: the registry gives it only those, validated
    def static_capabilities(cls, params: OpenAITargetParams) -> frozenset[Capability]:  # type: ignore[override]
        caps = {Capability.LOAD_CONTROL}
        reps = params.replicas
        if reps and params.toxiproxy_url and all(r.proxy for r in reps):
            caps.add(Capability.TOXIPROXY_REPLICA)
        if reps and all(r.container for r in reps):
            caps.add(Capability.DOCKER)
        if reps and all(r.pid_file or r.process_name for r in reps):
            caps.add(Capability.PROCESS)
        if params.supervised:
            caps.add(Capability.SUPERVISOR)
        if params.gpus:
            caps.add(Capability.NVIDIA_GPU)
        return frozenset(caps)

    @classmethod
    # override with its own Params: the registry gives it only those, validated
    def hosts(cls, params: OpenAITargetParams) -> list[tuple[str, str]]:  # type: ignore[override]
        found = [(_host(params.url), "target.config.url")]
        found += [(_host(r.url), f"target.config.replicas[{i}].url") for i, r in enumerate(params.replicas)]
        if params.toxiproxy_url:
            found.append((_host(params.toxiproxy_url), "target.config.toxiproxy_url"))
        for name, url in (params.metrics_urls or {}).items():
            found.append((_host(url), f"target.config.metrics_urls.{name}"))
        return found

    def describe_plan(self) -> list[str]:
        p: OpenAITargetParams = self.params
        lines = [f"attach to {p.url} (external; nothing is started or stopped)"]
        if p.start_command:
            lines.append(f"cold start runs: {' '.join(p.start_command)}")
        lines += [f"replica {r.name}: {r.url}" for r in p.replicas]
        return lines

    def start(self) -> TargetInfo:
        p: OpenAITargetParams = self.params
        if p.start_command:
            self._run_start_command(p.start_command)
        self._wait_healthy(p.url.rstrip("/") + p.health_path, p.startup_timeout)
        return self.info()

    def planned_info(self) -> TargetInfo:
        return self.info()

    def info(self) -> TargetInfo:
        p: OpenAITargetParams = self.params
        replicas = [
            ReplicaRef(
                name=r.name,
                index=i,
                url=r.url,
                container=r.container,
                pid_file=r.pid_file,
                process_name=r.process_name,
                proxy=r.proxy,
            )
            for i, r in enumerate(p.replicas)
        ]
        metrics = p.metrics_urls
        if metrics is None:
            metrics = {"target": p.url.rstrip("/") + "/metrics"}
            metrics.update({r.name: r.metrics_url for r in p.replicas if r.metrics_url})
        return TargetInfo(
            kind=self.kind,
            base_url=p.url.rstrip("/"),
            model=p.model,
            runtime="external",
            replicas=replicas,
            toxiproxy_url=p.toxiproxy_url,
            metrics_urls=metrics,
            capabilities=self.static_capabilities(p),
        )

    def stop(self) -> None:
        """Attached only: nothing to stop."""

    def request_headers(self) -> dict[str, str]:
        p: OpenAITargetParams = self.params
        headers = {name: _expand(value, f"headers.{name}") for name, value in p.headers.items()}
        if p.api_key is not None:
            headers["Authorization"] = f"Bearer {_expand(p.api_key, 'api_key')}"
        return headers

    @staticmethod
    def _run_start_command(command: list[str]) -> None:
        try:
            subprocess.run(command, check=True, timeout=120, capture_output=True)
        except (OSError, subprocess.SubprocessError) as exc:
            raise TargetError(f"start_command {' '.join(command)!r} failed: {exc}") from exc

    @staticmethod
    def _wait_healthy(url: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        with httpx.Client(timeout=5.0, trust_env=False) as client:
            while time.monotonic() < deadline:
                try:
                    response = client.get(url)
                    if response.status_code == 200:
                        return
                    last = f"HTTP {response.status_code}"
                except httpx.HTTPError as exc:
                    last = f"{type(exc).__name__}: {exc}"
                time.sleep(0.5)
        raise TargetError(
            f"target not healthy at {url} after {timeout_s:g}s ({last})",
            hint="is it running? check target.config.url and health_path",
        )
