"""The plugin SDK: everything a fault, target, trace source or check plugin may import from llm-drill.

The fault library (:mod:`faults`) imports nothing else from ``drill``, and a
third-party check needs nothing else either. Built-in faults and checks are
registered through the ``drill.faults`` and ``drill.checks`` entry points
exactly like third-party ones. The fault SDK is this module; the check SDK
(``Check``, ``CheckParams``, ``Verdict``, ``Status``, ``EvidenceRef``, and
``RunEvidence``, a finished run as a check reads it) is
:mod:`drill.api.check_sdk`, re-exported here.

A **fault** is a class with a ``kind``, a frozen ``Params`` model (units in the
names or the types), the capabilities it ``needs`` from a target, and three
methods, modelled on Toxiproxy's toxics and NVIDIA Dynamo's fault verification:

``inject(ctx)``
    Put the condition in place. Called once, after the engine journaled (fsync)
    how to revert it. Must not sleep for the fault's duration: the engine owns
    the timeline.
``verify(ctx) -> LandingProof``
    Prove the fault landed (a toxic is listed, a container is paused, the stack
    reports the memory taken). Raise :class:`FaultNotLanded` otherwise: a fault
    that silently does nothing is the worst failure of a chaos tool.
``revert(ctx)``
    Remove the condition. Idempotent, safe after a partial or failed inject,
    safe when nothing is in place, bounded in time. It may run in another
    process after a crash, rebuilt from the journal: everything it needs must
    come from ``params``, ``ctx.targets`` and what ``prepare`` saved.

``prepare(ctx) -> Saved`` (optional) captures prior state (e.g. the router's
retry configuration) before injection; the engine journals it with the revert
record.

A fault that can be produced in several ways (Toxiproxy, Docker, the stack's
admin API, real GPU tools) lists them as ``mechanisms``, one
:class:`Mechanism` per value of its ``method`` param, each with the
capabilities it needs and its :class:`Realism`; ``needs_for`` and
``realism_for`` then follow the chosen method. Every artefact a fault creates
is named from ``ctx.fault_id`` (e.g. the toxic ``drill-<fault_id>``) so a
revert rebuilt from the journal finds it.
"""

from __future__ import annotations

import abc
import enum
import importlib
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from drill.api.check_sdk import MAX_EVIDENCE, Check, CheckParams, EvidenceKind, EvidenceRef, Status, Verdict
from drill.errors import (
    AdminApiError,
    BackendError,
    DockerError,
    FaultError,
    FaultNotLanded,
    InjectError,
    KubernetesError,
    ProcessControlError,
    RevertError,
    ToxiproxyError,
)
from drill.units import Duration, Size, format_duration, parse_duration, parse_size

if TYPE_CHECKING:  # pragma: no cover
    # also what the backends answer, so a fault (which imports drill.api only) can name it in a type annotation
    from drill.backends.docker import ContainerInfo, DockerBackend  # noqa: F401
    from drill.backends.kubernetes import KubeClient, MainProcess, PodExecResult, PodInfo, ScaleInfo  # noqa: F401
    from drill.backends.nccl import NcclControl
    from drill.backends.nvidia import GpuControl
    from drill.backends.process import ProcessControl, ProcessInfo, ProcessRef  # noqa: F401
    from drill.backends.stack_admin import ReplicaAdminState, RouterAdminClient, StackAdminClient  # noqa: F401
    from drill.backends.toxiproxy import ToxiproxyClient

_B = TypeVar("_B")  # a backend client

__all__ = [
    "MAX_EVIDENCE",
    "AdminApiError",
    "BackendError",
    "Capability",
    "Check",
    "CheckParams",
    "DockerError",
    "Duration",
    "Evidence",
    "EvidenceKind",
    "EvidenceRef",
    "Fault",
    "LandingProof",
    "FaultContext",
    "FaultError",
    "FaultNotLanded",
    "FaultParams",
    "FaultTargets",
    "InjectError",
    "KubeAccess",
    "KubernetesError",
    "LinkKind",
    "LinkRef",
    "LoadControl",
    "PluginParams",
    "Mechanism",
    "ProcessControlError",
    "Realism",
    "ReplicaRef",
    "RevertError",
    "RouterRetryOn",
    "RunEvidence",
    "Saved",
    "Selector",
    "Size",
    "Status",
    "TargetInfo",
    "ToxiproxyError",
    "Verdict",
    "format_duration",
    "parse_duration",
    "parse_size",
]


#: Where ``RunEvidence`` (a finished run as the checks read it) lives. It reads the run directory's files with
#: their readers, which sit above the SDK, so the SDK loads it by name when a plugin first asks for it (as the
#: registry loads plugins): importing ``drill.api`` (a fault, the stack) never loads the run readers.
_RUN_EVIDENCE_MODULE = "drill.rundir.evidence"


def __getattr__(name: str) -> Any:
    """``drill.api.RunEvidence``, loaded on first use (see :data:`_RUN_EVIDENCE_MODULE`)."""
    if name == "RunEvidence":
        return importlib.import_module(_RUN_EVIDENCE_MODULE).RunEvidence
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Capability(str, enum.Enum):
    """What a target offers to faults. A fault's ``needs`` must be a subset."""

    TOXIPROXY_REPLICA = "toxiproxy.replica"  # a Toxiproxy proxy between router and each replica
    TOXIPROXY_TP_LINK = "toxiproxy.tp_link"  # a proxy on each TP rank link
    TOXIPROXY_PP_LINK = "toxiproxy.pp_link"  # a proxy on each PP stage link
    TOXIPROXY_KV_LINK = "toxiproxy.kv_link"  # a proxy on each (prefill, decode) worker pair's KV transfer link
    DOCKER = "docker"  # replicas run in Docker containers
    PROCESS = "process"  # replicas are local processes (PID known)
    SUPERVISOR = "supervisor"  # something restarts a replica that exits
    STACK_ADMIN = "stack.admin"  # the reference stack's admin API (simulated GPU conditions)
    ROUTER_ADMIN = "router.admin"  # the router's configuration API
    LOAD_CONTROL = "load.control"  # the drill's load driver (always present in a run)
    NVIDIA_GPU = "nvidia.gpu"  # real NVIDIA GPUs with nvidia-smi where the replicas run
    KUBERNETES = "kubernetes"  # replicas are pods of a workload, reached through the Kubernetes API
    CHAOS_MESH = "kubernetes.chaos_mesh"  # Chaos Mesh's NetworkChaos / PodChaos are installed in the cluster


class Realism(str, enum.Enum):
    """How real a fault's mechanism is, as ``drill faults describe`` shows it."""

    REAL = "real mechanism here"
    SIMULATED = "simulated"
    HARDWARE_UNVERIFIED = "real hardware only, not verified"


class LinkKind(str, enum.Enum):
    """A tensor-parallel link (rank 0 <-> rank i), a pipeline link (stage i -> stage i+1), or the KV transfer link
    between a prefill and a decode worker (disaggregated serving)."""

    TP = "tp"
    PP = "pp"
    KV = "kv"


class RouterRetryOn(str, enum.Enum):
    """Which upstream failures a router retries (the reference stack's ``retries.on``).

    Not the load driver's client retries: those are :class:`drill.spec.scenario.ClientRetryOn`.
    """

    ERROR = "error"  # connect/read failure or a 5xx answer
    TIMEOUT = "timeout"  # no answer (or no next chunk) within the attempt timeout


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LinkRef(_Frozen):
    """One inter-GPU link of a replica: rank 0 <-> TP rank ``rank``, PP stage ``rank``-1 -> ``rank``, or (``kv``) the
    KV transfer link to or from the worker with index ``rank`` (listed on both workers, one proxy)."""

    name: str
    kind: LinkKind
    rank: int
    proxy: str | None = None  # Toxiproxy proxy carrying this link


class ReplicaRef(_Frozen):
    """One serving replica, as the target describes it to faults."""

    name: str
    index: int
    url: str  # as the router (or client) reaches it
    direct_url: str | None = None
    admin_url: str | None = None
    admin_token: str | None = None
    container: str | None = None
    pid: int | None = None
    pid_file: str | None = None
    process_name: str | None = None
    proxy: str | None = None  # Toxiproxy proxy in front of it
    links: list[LinkRef] = Field(default_factory=list)
    role: Literal["prefill", "decode"] | None = None  # disaggregated serving: what the worker does; None: both
    pod: str | None = None  # the kubernetes target: the pod serving it when the target started
    pod_uid: str | None = None  # that pod's UID (a replacement pod has a new one)


class KubeAccess(_Frozen):
    """How a fault reaches the Kubernetes API and the workload (the kubernetes target's; journaled, no secret:
    the credentials stay in the kubeconfig file or the pod's service account)."""

    namespace: str
    workload_kind: Literal["Deployment", "StatefulSet", "LeaderWorkerSet"]
    workload: str
    selector: dict[str, str]
    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool = False


class TargetInfo(_Frozen):
    """What a started (or attached) target exposes; journaled so a revert can run after a crash."""

    kind: str
    base_url: str
    model: str | None = None
    runtime: Literal["local", "docker", "external"] = "external"
    replicas: list[ReplicaRef] = Field(default_factory=list)
    toxiproxy_url: str | None = None
    router_admin_url: str | None = None
    admin_token: str | None = None
    metrics_urls: dict[str, str] = Field(default_factory=dict)
    capabilities: frozenset[Capability] = frozenset()
    kubernetes: KubeAccess | None = None  # the kubernetes target: its cluster, namespace and workload


class Selector(_Frozen):
    """Which replicas, links and pools a fault hits.

    ``replicas`` by index or name; or ``fraction`` of them; or ``count`` of them;
    ``random: true`` picks at random with ``seed`` (default: the drill's seed),
    otherwise the first ones in index order. ``links`` narrows link faults to
    ``tp``/``pp`` kinds, rank numbers or link names. ``pools`` narrows
    load-side faults to scenario pools.
    """

    replicas: list[int | str] | None = None
    fraction: float | None = Field(None, gt=0, le=1)
    count: int | None = Field(None, ge=1)
    random: bool = False
    seed: int | None = None
    links: list[str | int] | None = None
    pools: list[str] | None = None

    @model_validator(mode="after")
    def _one_way(self) -> Selector:
        ways = [w for w in ("replicas", "fraction", "count") if getattr(self, w) is not None]
        if len(ways) > 1:
            raise ValueError(f"choose replicas one way only; got {' and '.join(ways)}")
        return self

    def pick_replicas(self, replicas: list[ReplicaRef], default_seed: int = 0) -> list[ReplicaRef]:
        """Resolve against ``replicas``; raises ValueError naming what did not match."""
        if self.replicas is not None:
            return [self._lookup(replicas, ref) for ref in self.replicas]
        n = len(replicas)
        if self.fraction is not None:
            n = max(1, round(self.fraction * len(replicas)))
        elif self.count is not None:
            if self.count > len(replicas):
                raise ValueError(f"selector wants {self.count} replicas; the target has {len(replicas)}")
            n = self.count
        elif len(replicas) > 1:
            n = 1  # a fault hits one replica unless told otherwise: the smallest blast radius
        if self.random:
            rng = random.Random(self.seed if self.seed is not None else default_seed)
            return sorted(rng.sample(replicas, n), key=lambda r: r.index)
        return list(replicas[:n])

    def pick_links(self, replica: ReplicaRef) -> list[LinkRef]:
        if not self.links:
            return list(replica.links)
        wanted = {str(w) for w in self.links}
        return [ln for ln in replica.links if {ln.kind.value, str(ln.rank), ln.name} & wanted]

    @staticmethod
    def _lookup(replicas: list[ReplicaRef], ref: int | str) -> ReplicaRef:
        for r in replicas:
            if ref == r.index or ref == r.name:
                return r
        known = ", ".join(f"{r.index}/{r.name}" for r in replicas) or "(none)"
        raise ValueError(f"no replica {ref!r}; the target has: {known}")


class FaultTargets(_Frozen):
    """The resolved blast radius of one fault: journaled before injection."""

    replicas: list[ReplicaRef] = Field(default_factory=list)
    links: list[LinkRef] = Field(default_factory=list)
    pools: list[str] = Field(default_factory=list)


class PluginParams(_Frozen):
    """Base of every plugin's ``Params``: frozen, unknown keys are errors."""


class FaultParams(PluginParams):
    """Base of every fault's ``Params``."""


class Saved(_Frozen):
    """Base of what ``prepare`` captures for ``revert`` (empty by default)."""


_SavedState = Saved  # the class Saved, for annotations inside Fault, whose attribute Saved shadows it


class LandingProof(_Frozen):
    """Proof that a fault landed (what ``verify`` returns): a sentence and the observations behind it.

    Not to be confused with :class:`drill.rundir.evidence.RunEvidence`, a finished run's files as the checks read them.
    """

    summary: str
    observations: dict[str, str | int | float | bool | None] = Field(default_factory=dict)


Evidence = LandingProof  # its earlier name, kept so fault plugins written against it still import


class Mechanism(_Frozen):
    """One way a fault can be produced, chosen by the value ``name`` of its ``method`` param."""

    name: str
    needs: frozenset[Capability] = frozenset()
    realism: Realism = Realism.REAL
    summary: str = ""


class LoadControl(abc.ABC):
    """How a fault drives the drill's load driver (e.g. a queue flood)."""

    @abc.abstractmethod
    def start_burst(
        self, burst_id: str, *, rate_multiplier: float, prompt_multiplier: float, pools: list[str]
    ) -> None: ...

    @abc.abstractmethod
    def end_burst(self, burst_id: str) -> None:
        """Idempotent: ending an unknown or ended burst is a no-op."""

    @abc.abstractmethod
    def burst_status(self, burst_id: str) -> dict[str, float]:
        """``{"active": 0|1, "sent": n, "offered_rate": r}`` as the driver reports it."""


@dataclass
class FaultContext:
    """What a fault sees while it runs. Backends are built on first use from ``target``."""

    fault_id: str
    target: TargetInfo
    targets: FaultTargets
    saved: Saved | None = None
    timeout_s: float = 10.0
    load: LoadControl | None = None
    note: Callable[[str], object] = field(default=lambda message: None)  # what it returns is ignored
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def toxiproxy(self) -> ToxiproxyClient:
        url = self.target.toxiproxy_url
        if url is None:
            raise ToxiproxyError(
                "this target has no Toxiproxy server", hint="use the embedded stack, or set target.config.toxiproxy_url"
            )
        return self._backend("toxiproxy", lambda: _toxiproxy(url, self.timeout_s))

    @property
    def docker(self) -> DockerBackend:
        return self._backend("docker", lambda: _docker(self.timeout_s))

    @property
    def processes(self) -> ProcessControl:
        return self._backend("process", lambda: _processes(self.timeout_s))

    @property
    def gpus(self) -> GpuControl:
        """Real NVIDIA GPUs: ``nvidia-smi`` on this host or in a replica's container (not verified on hardware)."""
        return self._backend("gpus", lambda: _gpus(self.timeout_s, lambda: self.docker))

    @property
    def nccl(self) -> NcclControl:
        """NCCL link degradation on real multi-GPU hosts: netem, transport downgrade (not verified on hardware)."""
        return self._backend("nccl", lambda: _nccl(self.timeout_s, lambda: self.docker))

    @property
    def kubernetes(self) -> KubeClient:
        """The Kubernetes API in the target's namespace (the kubernetes target only)."""
        access = self.target.kubernetes
        if access is None:
            raise KubernetesError(
                f"target {self.target.kind!r} is not on Kubernetes",
                hint="use the kubernetes target (docs/kubernetes.md)",
            )
        return self._backend("kubernetes", lambda: _kubernetes(access, self.timeout_s))

    def stack_admin(self, replica: ReplicaRef) -> StackAdminClient:
        """The replica's admin API client (one per replica, cached); AdminApiError if it has none."""
        url = replica.admin_url
        if not url:
            raise AdminApiError(
                f"replica {replica.name} has no admin API",
                hint="GPU conditions are simulated only by the embedded reference stack",
            )
        # lazy: a fault that never asks for this client never loads its backend (tests/faults/test_import_boundary.py)
        from drill.backends.stack_admin import StackAdminClient

        return self._backend(
            f"stack_admin:{replica.name}",
            lambda: StackAdminClient(url, replica.admin_token, timeout_s=self.timeout_s),
        )

    def router_admin(self) -> RouterAdminClient:
        """The router's admin API client (cached); AdminApiError if the target has none."""
        url = self.target.router_admin_url
        if not url:
            raise AdminApiError(
                "this target's router has no admin API", hint="router faults need the embedded reference stack's router"
            )
        # lazy: a fault that never asks for this client never loads its backend (tests/faults/test_import_boundary.py)
        from drill.backends.stack_admin import RouterAdminClient

        return self._backend(
            "router_admin",
            lambda: RouterAdminClient(url, self.target.admin_token, timeout_s=self.timeout_s),
        )

    def _backend(self, name: str, factory: Callable[[], _B]) -> _B:
        if name not in self._cache:
            self._cache[name] = factory()
        return self._cache[name]

    def close(self) -> None:
        for backend in self._cache.values():
            closer = getattr(backend, "close", None)
            if closer is not None:
                closer()
        self._cache.clear()


def _toxiproxy(url: str, timeout_s: float) -> ToxiproxyClient:
    # lazy: a fault that never asks for this client never loads its backend (tests/faults/test_import_boundary.py)
    from drill.backends.toxiproxy import ToxiproxyClient

    return ToxiproxyClient(url, timeout_s=timeout_s)


def _docker(timeout_s: float) -> DockerBackend:
    # lazy: a fault that never asks for this client never loads its backend (tests/faults/test_import_boundary.py)
    from drill.backends.docker import DockerBackend

    return DockerBackend(timeout_s=timeout_s)


def _kubernetes(access: KubeAccess, timeout_s: float) -> KubeClient:
    # lazy: a fault that never asks for this client never loads its backend (tests/faults/test_import_boundary.py)
    from drill.backends.kubernetes import KubeClient

    return KubeClient(
        access.namespace,
        kubeconfig=access.kubeconfig,
        context=access.context,
        in_cluster=access.in_cluster,
        timeout_s=timeout_s,
    )


def _processes(timeout_s: float) -> ProcessControl:
    # lazy: a fault that never asks for this client never loads its backend (tests/faults/test_import_boundary.py)
    from drill.backends.process import ProcessControl

    return ProcessControl(timeout_s=timeout_s)


def _gpus(timeout_s: float, docker: Callable[[], DockerBackend]) -> GpuControl:
    # lazy: a fault that never asks for this client never loads its backend (tests/faults/test_import_boundary.py)
    from drill.backends.nvidia import GpuControl

    return GpuControl(timeout_s=timeout_s, docker=docker)


def _nccl(timeout_s: float, docker: Callable[[], DockerBackend]) -> NcclControl:
    # lazy: a fault that never asks for this client never loads its backend (tests/faults/test_import_boundary.py)
    from drill.backends.nccl import NcclControl

    return NcclControl(timeout_s=timeout_s, docker=docker)


class Fault(abc.ABC):
    """Base class of every fault. See the module docstring for the contract."""

    kind: ClassVar[str]
    Params: ClassVar[type[FaultParams]] = FaultParams
    Saved: ClassVar[type[Saved]] = Saved
    #: Capabilities needed whatever the method (a mechanism's own needs are added to these).
    needs: ClassVar[frozenset[Capability]] = frozenset()
    #: The realism when the fault has no ``mechanisms``; otherwise the chosen mechanism's.
    realism: ClassVar[Realism] = Realism.REAL
    #: Ways to produce the fault, selected by the ``method`` param (empty: one way only).
    mechanisms: ClassVar[tuple[Mechanism, ...]] = ()
    summary: ClassVar[str] = ""
    revert_semantics: ClassVar[str] = ""
    #: "replicas", "links", "pools" or "none": what the selector picks for this fault.
    scope: Literal["replicas", "links", "pools", "none"] = "replicas"

    def __init__(self, params: FaultParams) -> None:
        self.params = params

    def mechanism_for(self, params: FaultParams) -> Mechanism | None:
        """The mechanism the ``method`` param selects; None for a fault with one way only."""
        method = getattr(params, "method", None)
        name = getattr(method, "value", method)
        return next((m for m in self.mechanisms if m.name == name), None)

    def needs_for(self, params: FaultParams) -> frozenset[Capability]:
        """Capabilities needed with these params: ``needs`` plus the chosen mechanism's."""
        mechanism = self.mechanism_for(params)
        return self.needs | mechanism.needs if mechanism else self.needs

    def realism_for(self, params: FaultParams) -> Realism:
        """How real the fault is with these params (the chosen mechanism's realism)."""
        mechanism = self.mechanism_for(params)
        return mechanism.realism if mechanism else self.realism

    def prepare(self, ctx: FaultContext) -> _SavedState:
        """Capture prior state that ``revert`` restores. Called before the revert record is journaled."""
        return self.Saved()

    @abc.abstractmethod
    def inject(self, ctx: FaultContext) -> None:
        """Put the condition in place (raise InjectError or a BackendError on failure)."""

    @abc.abstractmethod
    def verify(self, ctx: FaultContext) -> LandingProof:
        """Return proof the condition is in place, or raise FaultNotLanded."""

    @abc.abstractmethod
    def revert(self, ctx: FaultContext) -> None:
        """Remove the condition: idempotent, safe after a partial inject, bounded in time."""

    def describe_targets(self, ctx: FaultContext) -> list[str]:
        """Human-readable list of what this fault touches (for ``drill plan``)."""
        if self.scope == "links":
            return [f"link {ln.name} (proxy {ln.proxy})" for ln in ctx.targets.links]
        if self.scope == "pools":
            return [f"load pool {p}" for p in ctx.targets.pools] or ["all load pools"]
        if self.scope == "none":
            return [f"target {ctx.target.base_url}"]
        return [f"replica {r.name} ({r.url})" for r in ctx.targets.replicas]


@dataclass(frozen=True)
class TargetContext:
    """What the runner tells a target when it starts it."""

    run_id: str
    run_dir: str
    otlp_endpoint: str | None = None
    seed: int = 0
    #: the drill's faults, (kind, validated params), so a target can check before it starts that its
    #: credentials allow what they will do (the kubernetes target's RBAC pre-flight)
    faults: tuple[tuple[str, BaseModel], ...] = ()
    #: where each fault's ``params.method`` is written in the drill file (``file:line:col``), so a refusal found
    #: when the target starts (an exec method the pods cannot take) names the line to change
    fault_at: tuple[str, ...] = ()


class Target(abc.ABC):
    """Base class of ``drill.targets`` plugins: start (or attach to) a serving stack.

    ``start`` returns once the target answers its health check; the runner then
    measures the time to the first good response (cold start). ``teardown_data``
    is journaled *before* ``start`` so that, if the runner dies, the watchdog or
    ``drill cleanup`` can call the ``teardown`` classmethod with it. A target that
    only attaches returns None and is never torn down.
    """

    kind: ClassVar[str]
    Params: ClassVar[type[BaseModel]]

    def __init__(self, params: BaseModel, ctx: TargetContext) -> None:
        self.params = params
        self.ctx = ctx

    @classmethod
    def static_capabilities(cls, params: BaseModel) -> frozenset[Capability]:
        """Capabilities known from the configuration alone (checked at validation time)."""
        return frozenset()

    @classmethod
    def hosts(cls, params: BaseModel) -> list[tuple[str, str]]:
        """Every (host, where) the target would touch, for the loopback safety check."""
        return []

    @classmethod
    def check_scenario(cls, params: BaseModel, scenario: BaseModel) -> list[tuple[tuple, str, str | None]]:
        """Problems of this target with this load, found before anything starts.

        Returns ``(key path under target.config, message, hint)`` triples, e.g. a scenario that sends
        priorities to a target that refuses them.
        """
        return []

    def describe_plan(self) -> list[str]:
        """What starting this target would touch (for ``drill plan``)."""
        return []

    def teardown_data(self) -> dict | None:
        return None

    def planned_info(self) -> TargetInfo | None:
        """The target as it will look once started, without any I/O (for ``drill plan``); None if unknown."""
        return None

    @abc.abstractmethod
    def start(self) -> TargetInfo:
        """Start or attach; return when healthy. Raises TargetError."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop what ``start`` started (idempotent); leave alone what was only attached."""

    def request_headers(self) -> dict[str, str]:
        """Headers every request to the target carries (credentials: ``Authorization``, ``X-Api-Key``).

        The load generator, the probes and the recovery replay send them; they are never journaled, and a
        stored failing sample drops them (the replay adds them again from here). The default is none.
        """
        return {}

    def collect_evidence(self, run_dir: str) -> list[str]:
        """Copy what the target itself recorded during the run into ``run_dir``; return the files written.

        The runner calls it once, right before :meth:`stop`, while the target still runs (a failure is
        journaled and the shutdown goes on). Targets that keep their own records — the embedded stack's
        side-effect ledgers (``ledger/replica-<i>.jsonl``) — put them where the checks read them, so a
        past run can be judged from its directory alone. Paths are relative to ``run_dir``. The
        default copies nothing.
        """
        return []

    @classmethod  # noqa: B027 -- an optional hook: a target that starts nothing has nothing to stop
    def teardown(cls, data: dict) -> None:
        """Stop a target a dead run started, from its journaled ``teardown_data``."""

    @classmethod
    def describe_teardown(cls, data: dict) -> list[str]:
        """What :meth:`teardown` would stop or remove, one line each (``drill cleanup --dry-run``)."""
        return []


__all__ += ["Target", "TargetContext"]


@dataclass(frozen=True)
class SpanFileHead:
    """The start of a span file, as every trace source's :meth:`TraceSource.sniff` sees it: its content, never its
    name (``drill traces analyze`` reads files whatever they are called)."""

    head: bytes  # the file's first bytes (at most drill.traces.detect.HEAD_BYTES)
    text: bool  # UTF-8 text with no NUL byte (a multi-byte character cut at the end still counts as text)
    keys: frozenset[str]  # the keys of its first JSON object (empty when there is none)

    @property
    def empty(self) -> bool:
        """Nothing but white space: a span file with no span yet."""
        return not self.head.strip()


class TraceSource(abc.ABC):
    """Base class of ``drill.traces`` plugins: read normalized spans for a time window, read-only.

    A span is a dict in the normalized shape of :mod:`drill.traces.otlp` (hex ids, ``start_ns``/``end_ns``
    in UNIX ns, ``service``, ``name``, ``kind``, ``status``, ``attributes``). ``window`` is
    ``(start_ns, end_ns)`` in wall-clock UNIX ns, or None for everything.

    A source that reads a file format names the Params field that takes the file (``file_param``) and says, from a
    file's first bytes, whether the file is in its format (``sniff``): that is how ``drill traces analyze`` picks
    the source of each file it is given, so adding a format is one module and one entry point. At most one
    source may claim a file; a source that reads no file (an HTTP API) keeps the defaults.
    """

    kind: ClassVar[str]
    Params: ClassVar[type[BaseModel]]
    #: The Params field naming the file (or folder) it reads; None for a source that reads no file.
    file_param: ClassVar[str | None] = None
    #: Its format in messages, e.g. "OTLP JSON lines" (what ``drill traces analyze`` lists as supported).
    format_name: ClassVar[str] = ""

    def __init__(self, params: BaseModel, run_dir: str) -> None:
        self.params = params
        self.run_dir = run_dir

    @classmethod
    def sniff(cls, head: SpanFileHead) -> bool:
        """Whether a file starting with ``head`` is in this source's format (by content alone). Default: never."""
        return False

    @abc.abstractmethod
    def spans(self, window: tuple[int, int] | None = None) -> Iterator[dict]:
        """Yield spans that overlap ``window``."""


__all__ += ["SpanFileHead", "TraceSource"]
