"""``kind: openai``: an external OpenAI-compatible serving stack (vLLM, SGLang, TGI, ...).

The harness attaches to what is already running; it starts nothing and tears
nothing down, unless ``start_command`` is given for the cold-start phase. The
``replicas`` list tells faults how each replica can be reached: its URL, its
Toxiproxy proxy, its container, its PID file or process name.

A replica may give its server's ``upstream`` (host:port) instead of a ``url`` and a proxy made by hand:
the harness then puts a Toxiproxy proxy in front of it (:mod:`drill.targets.proxies`; its own Toxiproxy
server when ``toxiproxy_url`` is not given), sends its load through it, prints the address a router
should use, and removes it after the run (or the watchdog / ``drill cleanup`` does, after a crash).
With one such replica and no ``url``, the drill talks to the proxy directly: no router needed.

.. code-block:: yaml

    target:
      kind: openai
      config:
        url: http://127.0.0.1:8000
        toxiproxy_url: http://127.0.0.1:8474
        replicas:
          - {name: vllm-0, url: http://127.0.0.1:8001, container: vllm-0, proxy: vllm-0}
          - {name: vllm-1, url: http://127.0.0.1:8002, pid_file: /run/vllm-1.pid}

    target:          # one llama-server, no router: the harness makes the proxy and its Toxiproxy server
      kind: openai
      config:
        replicas:
          - {name: llama-0, upstream: 127.0.0.1:8080, pid_file: /run/llama-0.pid}
"""

from __future__ import annotations

import subprocess
import sys
from typing import ClassVar
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from drill.api import Capability, ReplicaRef, Target, TargetContext, TargetInfo
from drill.errors import TargetError
from drill.spec.validation import SpecModel, at_key, expand_env
from drill.targets.probe import unhealthy_after
from drill.targets.proxies import (
    HarnessProxies,
    HarnessProxyPlan,
    MadeProxy,
    describe_planned,
    parse_address,
    plan_proxies,
    proxy_name,
    remove_planned,
    valid_replica_name,
)
from drill.units import Duration

__all__ = ["OpenAITarget", "OpenAITargetParams"]


class ReplicaConfig(SpecModel):
    name: str
    url: str | None = Field(None, pattern=r"^https?://")  # as the router reaches it
    #: host:port of the replica's server: the harness puts a Toxiproxy proxy in front (instead of ``url``)
    upstream: str | None = None
    #: host:port the harness's proxy listens on (default: a free port on 127.0.0.1); needs ``upstream``
    listen: str | None = None
    metrics_url: str | None = None
    container: str | None = None
    pid_file: str | None = None
    process_name: str | None = None
    proxy: str | None = None  # a proxy made by hand on ``toxiproxy_url``

    @field_validator("upstream")
    @classmethod
    def _upstream_address(cls, value: str | None) -> str | None:
        if value is not None:
            parse_address(value)
        return value

    @field_validator("listen")
    @classmethod
    def _listen_address(cls, value: str | None) -> str | None:
        if value is not None:
            parse_address(value, port_zero=True)
        return value

    @model_validator(mode="after")
    def _url_or_upstream(self) -> ReplicaConfig:
        if self.url is None and self.upstream is None:
            raise at_key("url", "a replica needs 'url' (how the router reaches it) or 'upstream' (its host:port)")
        if self.url is not None and self.upstream is not None:
            raise at_key("upstream", "give 'url' or 'upstream', not both: the harness's proxy is the URL")
        if self.upstream is not None and self.proxy is not None:
            raise at_key("proxy", "with 'upstream' the harness makes the proxy: drop 'proxy' (or give 'url' instead)")
        if self.listen is not None and self.upstream is None:
            raise at_key("listen", "'listen' is where the harness's proxy listens: it needs 'upstream'")
        if self.upstream is not None and not valid_replica_name(self.name):
            raise at_key("name", "with 'upstream' the name is part of the proxy's name: letters, digits, '_', '.', '-'")
        return self


class OpenAITargetParams(SpecModel):
    #: The fields whose ``${NAME}`` are expanded at start (validation checks that each NAME is set).
    env_fields: ClassVar[tuple[str, ...]] = ("headers", "api_key")

    url: str | None = Field(None, pattern=r"^https?://")  # the router; optional for one replica with ``upstream``
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

    @model_validator(mode="after")
    def _router_or_one_upstream(self) -> OpenAITargetParams:
        reps = self.replicas
        if self.url is None and not (len(reps) == 1 and reps[0].upstream):
            found = f"{len(reps)} replicas" if len(reps) != 1 else "a replica with its own 'url'"
            raise at_key(
                "url",
                f"missing: the URL the drill sends its load to ({found}); without 'url' the drill talks to the "
                "proxy in front of a single replica that gives 'upstream'",
            )
        names = [r.name for r in reps]
        if len(set(names)) != len(names):
            raise at_key("replicas", f"replica names must be unique, got {names}")
        if not self.toxiproxy_url and any(r.upstream for r in reps) and any(r.proxy for r in reps):
            raise at_key(
                "toxiproxy_url",
                "missing: replicas with a hand-made 'proxy' need the server it is on; the harness's own server "
                "would not have it",
            )
        return self


def _host(url: str) -> str:
    return urlsplit(url).hostname or ""


def _planned_listen(listen: str | None) -> str:
    """A harness proxy's address before it exists: as given, else the port is the server's choice."""
    return listen if listen and not listen.endswith(":0") else "127.0.0.1:(port assigned at start)"


def _expand(value: str, where: str) -> str:
    """``${NAME}`` replaced by the environment variable NAME; an unset one is an error naming where."""
    return expand_env(value, f"target.config.{where}", TargetError)


class OpenAITarget(Target):
    kind = "openai"
    Params = OpenAITargetParams
    params: OpenAITargetParams

    def __init__(self, params: OpenAITargetParams, ctx: TargetContext) -> None:
        super().__init__(params, ctx)
        self._plan: HarnessProxyPlan | None = None  # the harness's proxies for ``upstream`` replicas, reserved once
        self._proxies: HarnessProxies | None = None  # while they may exist
        self._made: dict[str, MadeProxy] = {}  # replica name -> its proxy as created

    @classmethod
    # override with its own Params: the registry gives it only those, validated
    def static_capabilities(cls, params: OpenAITargetParams) -> frozenset[Capability]:  # type: ignore[override]
        caps = {Capability.LOAD_CONTROL}
        reps = params.replicas
        hand_made_reachable = params.toxiproxy_url or not any(r.proxy for r in reps)
        if reps and hand_made_reachable and all(r.proxy or r.upstream for r in reps):
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
        found = [(_host(params.url), "target.config.url")] if params.url else []
        for i, r in enumerate(params.replicas):
            where = f"target.config.replicas[{i}]"
            found += [(_host(r.url), f"{where}.url")] if r.url else []
            found += [(parse_address(r.upstream)[0], f"{where}.upstream")] if r.upstream else []
            found += [(parse_address(r.listen, port_zero=True)[0], f"{where}.listen")] if r.listen else []
        if params.toxiproxy_url:
            found.append((_host(params.toxiproxy_url), "target.config.toxiproxy_url"))
        for name, url in (params.metrics_urls or {}).items():
            found.append((_host(url), f"target.config.metrics_urls.{name}"))
        return found

    def describe_plan(self) -> list[str]:
        p: OpenAITargetParams = self.params
        plan = self._proxy_plan()
        if plan is None:
            lines = [f"attach to {p.url} (external; nothing is started or stopped)"]
        elif p.url is None:
            lines = ["attach to one server through the harness's proxy (no router: the drill talks to the proxy)"]
        else:
            lines = [f"attach to {p.url} (external); the harness makes a Toxiproxy proxy per upstream replica"]
        if plan is not None:
            where = f"on {plan.toxiproxy_url}" if plan.toxiproxy_url else "on a Toxiproxy server the harness starts"
            lines.append(f"proxies {where}, removed after the run (or by drill cleanup)")
        if p.start_command:
            lines.append(f"cold start runs: {' '.join(p.start_command)}")
        return lines + self._replica_lines()

    def _replica_lines(self) -> list[str]:
        """Each replica's address; for a harness proxy, the one a router (or the drill) should use."""
        made, lines = self._made, []
        for r in self.params.replicas:
            if r.upstream is None:
                lines.append(f"replica {r.name}: {r.url}")
                continue
            listen = made[r.name].listen if r.name in made else _planned_listen(r.listen)
            who = "point the router at" if self.params.url else "the drill talks to"
            lines.append(f"replica {r.name}: {who} {listen} (a Toxiproxy proxy -> {r.upstream})")
        return lines

    def teardown_data(self) -> dict | None:
        """The proxy plan (journaled before :meth:`start` creates anything); None when nothing is made."""
        plan = self._reserved_plan()
        return None if plan is None else plan.model_dump(mode="json")

    @classmethod
    def teardown(cls, data: dict) -> None:
        """Remove the proxies (and stop the Toxiproxy server) a dead run made, from its journaled plan."""
        remove_planned(HarnessProxyPlan.model_validate(data))

    @classmethod
    def describe_teardown(cls, data: dict) -> list[str]:
        """The proxies (and the Toxiproxy server) :meth:`teardown` would remove."""
        return describe_planned(HarnessProxyPlan.model_validate(data))

    def start(self) -> TargetInfo:
        p: OpenAITargetParams = self.params
        if p.start_command:
            self._run_start_command(p.start_command)
        plan = self._reserved_plan()
        if plan is not None:
            self._proxies = HarnessProxies(plan)
            self._made = {m.replica: m for m in self._proxies.create()}
            print("\n".join(f"harness proxy: {line}" for line in self._replica_lines()), file=sys.stderr)
        self._wait_healthy(self._base_url() + p.health_path, p.startup_timeout)
        return self.info()

    def _proxy_plan(self) -> HarnessProxyPlan | None:
        """The proxies this run makes (unreserved: no port picked yet); None when no replica gives upstream."""
        p: OpenAITargetParams = self.params
        wanted = [(r.name, r.upstream, r.listen) for r in p.replicas if r.upstream]
        if not wanted:
            return None
        return plan_proxies(self.ctx.run_id, self.ctx.run_dir, wanted, p.toxiproxy_url)

    def _reserved_plan(self) -> HarnessProxyPlan | None:
        if self._plan is None:
            plan = self._proxy_plan()
            self._plan = plan.reserve() if plan is not None else None
        return self._plan

    def _base_url(self) -> str:
        """The router's URL, else the proxy in front of the one replica (as created, else as planned)."""
        p: OpenAITargetParams = self.params
        if p.url:
            return p.url.rstrip("/")
        only = p.replicas[0]
        return "http://" + (self._made[only.name].listen if only.name in self._made else _planned_listen(only.listen))

    def planned_info(self) -> TargetInfo:
        return self.info()

    def info(self) -> TargetInfo:
        p: OpenAITargetParams = self.params
        replicas = [self._replica_ref(i, r) for i, r in enumerate(p.replicas)]
        metrics = p.metrics_urls
        if metrics is None:
            # one server and no router: its own /metrics, not through the proxy a fault slows
            origin = p.url.rstrip("/") if p.url else f"http://{p.replicas[0].upstream}"
            metrics = {"target": origin + "/metrics"}
            metrics.update({r.name: r.metrics_url for r in p.replicas if r.metrics_url})
        plan = self._plan or self._proxy_plan()
        toxiproxy_url = p.toxiproxy_url
        if plan is not None and plan.server is not None:
            toxiproxy_url = plan.url if plan.server.port else "(the harness's Toxiproxy server, started with the run)"
        return TargetInfo(
            kind=self.kind,
            base_url=self._base_url(),
            model=p.model,
            runtime="external",
            replicas=replicas,
            toxiproxy_url=toxiproxy_url,
            metrics_urls=metrics,
            capabilities=self.static_capabilities(p),
        )

    def _replica_ref(self, index: int, r: ReplicaConfig) -> ReplicaRef:
        url, proxy, direct = r.url, r.proxy, None
        if r.upstream is not None:
            made = self._made.get(r.name)
            url = "http://" + (made.listen if made else _planned_listen(r.listen))
            proxy, direct = proxy_name(self.ctx.run_id, r.name), f"http://{r.upstream}"
        return ReplicaRef(
            name=r.name,
            index=index,
            url=url or "",
            direct_url=direct,
            container=r.container,
            pid_file=r.pid_file,
            process_name=r.process_name,
            proxy=proxy,
        )

    def stop(self) -> None:
        """Remove the harness's proxies (and its Toxiproxy server); what was only attached is left alone."""
        proxies, self._proxies = self._proxies, None
        if proxies is not None:
            self._made = {}
            proxies.remove()

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
        last = unhealthy_after(url, timeout_s, poll_s=0.5)
        if last is None:
            return
        raise TargetError(
            f"target not healthy at {url} after {timeout_s:g}s ({last})",
            hint="is it running? check target.config.url and health_path",
        )
