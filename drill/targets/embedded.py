"""``kind: embedded``: the reference serving stack, started for the run and stopped after it.

``target.config`` is a stack configuration (``docs/design/stack-contracts.md`` §1):
model and GPU presets, replicas, engine options with vLLM's names, router, links
and runtime. The runner starts the stack with the same launcher as
``drill stack up`` (named ``drill-<run id>``, so it never collides with a stack
you started by hand), sends its spans to the run's OTLP receiver, and stops it
at the end. The stack's name is journaled before it starts, so the watchdog or
``drill cleanup`` can stop it if the runner dies.
Before it stops the stack, the runner has the replicas' side-effect ledgers copied into the
run directory (``ledger/replica-<i>.jsonl``, :meth:`EmbeddedStack.collect_evidence`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from drill.api import Capability, LinkKind, LinkRef, ReplicaRef, Target, TargetInfo
from drill.stack.config import Runtime, StackConfig
from drill.stack.supervision.launcher import start_stack, stop_stack
from drill.stack.supervision.state import read_state

if TYPE_CHECKING:
    from drill.spec.scenario import Scenario
    from drill.stack.supervision.state import StackState

__all__ = ["EmbeddedStack"]

START_TIMEOUT_S = 300.0


def stack_name(run_id: str) -> str:
    return f"drill-{run_id.lower()}"[:41]


class EmbeddedStack(Target):
    kind = "embedded"
    Params = StackConfig
    params: StackConfig
    _state = None  # the StackState ``start`` got (its replicas' ledger paths)

    @classmethod
    # override with its own Params: the registry gives it only those, validated
    def static_capabilities(cls, params: StackConfig) -> frozenset[Capability]:  # type: ignore[override]
        caps = {
            Capability.SUPERVISOR,
            Capability.STACK_ADMIN,
            Capability.ROUTER_ADMIN,
            Capability.LOAD_CONTROL,
            Capability.DOCKER if params.runtime is Runtime.DOCKER else Capability.PROCESS,
        }
        if params.links.replica_proxies:
            caps.add(Capability.TOXIPROXY_REPLICA)
        engines = [params.engine_of(index) for index in range(params.replicas)]  # P/D: each role's own
        if params.links.tp_proxies and any(e.tensor_parallel_size > 1 for e in engines):
            caps.add(Capability.TOXIPROXY_TP_LINK)
        if params.links.pp_proxies and any(e.pipeline_parallel_size > 1 for e in engines):
            caps.add(Capability.TOXIPROXY_PP_LINK)
        if params.topology is not None and params.topology.kv_transfer.proxies:
            caps.add(Capability.TOXIPROXY_KV_LINK)
        return frozenset(caps)

    @classmethod
    # override with its own Params: the registry gives it only those, validated
    def hosts(cls, params: StackConfig) -> list[tuple[str, str]]:  # type: ignore[override]
        return [(params.host, "target.config.host")]

    @classmethod
    # override with its own Params: the registry gives it only those, validated
    def check_scenario(cls, params: StackConfig, scenario: Scenario) -> list[tuple[tuple, str, str | None]]:  # type: ignore[override]
        """vLLM refuses a non-zero priority with 400 unless it schedules by priority; so does the stack."""
        urgent = sorted({p.priority for p in scenario.pools if p.priority != 0})
        if urgent and params.engine.scheduling_policy.value != "priority":
            pools = ", ".join(p.name for p in scenario.pools if p.priority != 0)
            return [
                (
                    ("engine", "scheduling_policy"),
                    f"the scenario's pools {pools} send priorities {urgent}, which the stack refuses with 400 "
                    f"under scheduling_policy {params.engine.scheduling_policy.value!r} (as vLLM does)",
                    "set target.config.engine.scheduling_policy: priority, or give every pool priority 0",
                )
            ]
        return []

    @property
    def name(self) -> str:
        return stack_name(self.ctx.run_id)

    def describe_plan(self) -> list[str]:
        p: StackConfig = self.params
        e = p.engine
        return [
            f"start the embedded reference stack ({p.runtime.value}): {p.replicas} replica(s) of {p.model} on "
            f"{p.gpu}, TP={e.tensor_parallel_size} PP={e.pipeline_parallel_size}, router {p.router.policy.value}",
            f"admission control: max_num_queued_reqs={e.max_num_queued_reqs}, "
            f"max_num_queued_tokens={e.max_num_queued_tokens}, max_queue_wait={e.max_queue_wait}",
            "Toxiproxy proxies: "
            + ", ".join(
                k
                for k, on in (
                    ("replicas", p.links.replica_proxies),
                    ("TP links", p.links.tp_proxies),
                    ("PP links", p.links.pp_proxies),
                )
                if on
            ),
            *_describe_topology(p),
        ]

    def teardown_data(self) -> dict:
        return {"name": self.name}

    def start(self) -> TargetInfo:
        state = start_stack(
            self.params, name=self.name, otlp_endpoint=self.ctx.otlp_endpoint, timeout_s=START_TIMEOUT_S
        )
        self._state = state
        return info_from_state(state, self.static_capabilities(self.params))

    def stop(self) -> None:
        stop_stack(self.name)

    def collect_evidence(self, run_dir: str) -> list[str]:
        """Copy each replica's side-effect ledger to ``<run_dir>/ledger/replica-<i>.jsonl``.

        The ledgers live in the stack's own directory (``ledger_path`` of each replica in the state
        file, :mod:`drill.stack.supervision.stack_plan`); with ``runtime: docker`` that directory is bind-mounted at the
        same host path, so both runtimes are copied the same way. A replica still writes while this
        runs, so a copy ends at the last complete line. A replica whose ledger does not exist is
        left out (the checks report the missing replica).
        """
        state = getattr(self, "_state", None) or read_state(self.name)
        if state is None:
            return []
        folder = Path(run_dir) / "ledger"
        written = []
        for replica in state.replicas:
            if copy_complete_lines(Path(replica.ledger_path), folder / f"replica-{replica.index}.jsonl"):
                written.append(f"ledger/replica-{replica.index}.jsonl")
        return written

    @classmethod
    def teardown(cls, data: dict) -> None:
        stop_stack(data["name"])

    def planned_info(self) -> TargetInfo:
        p: StackConfig = self.params
        replicas = [
            ReplicaRef(
                name=f"replica-{i}",
                index=i,
                url="(assigned at start)",
                links=_planned_links(p, i),
                role=p.topology.role_of(i).value if p.topology else None,
            )
            for i in range(p.replicas)
        ]
        return TargetInfo(
            kind=self.kind,
            base_url="(assigned at start)",
            runtime=p.runtime.value,
            replicas=replicas,
            capabilities=self.static_capabilities(p),
        )


def _describe_topology(p: StackConfig) -> list[str]:
    """The P/D line of ``drill plan`` (nothing for an aggregated stack)."""
    topology = p.topology
    if topology is None:
        return []
    kv = topology.kv_transfer
    lease = "none (waits for ever)" if kv.lease is None else f"{kv.lease:g}s"
    checked = "checked" if kv.check_block_versions else "not checked"
    return [
        f"disaggregated: {topology.prefill} prefill + {topology.decode} decode worker(s); KV lease {lease}, "
        f"failure policy {kv.failure_policy.value}, block versions {checked}, "
        f"KV link proxies {'on' if kv.proxies else 'off'}",
        *(_role_engine_line(p, role, index) for role, index in (("prefill", 0), ("decode", topology.prefill))),
    ]


def _role_engine_line(p: StackConfig, role: str, index: int) -> str:
    """``prefill workers: TP=4 PP=1`` (each role's own engine, topology.<role>_engine over engine)."""
    engine = p.engine_of(index)
    return f"{role} workers: TP={engine.tensor_parallel_size} PP={engine.pipeline_parallel_size}"


def copy_complete_lines(source: Path, target: Path) -> bool:
    """Copy ``source`` up to its last newline (a line being written is left out); False when it is absent."""
    try:
        data = source.read_bytes()
    except FileNotFoundError:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data[: data.rfind(b"\n") + 1])
    return True


def _planned_links(p: StackConfig, index: int) -> list[LinkRef]:
    """Link names as the launcher will make them (at the replica's own TP/PP), less the ``<stack>-`` prefix known
    only at start."""
    engine = p.engine_of(index)
    links = [
        LinkRef(
            name=f"replica-{index}-tp{r}",
            kind=LinkKind.TP,
            rank=r,
            proxy=f"<stack>-replica-{index}-tp{r}" if p.links.tp_proxies else None,
        )
        for r in range(1, engine.tensor_parallel_size)
    ]
    links += [
        LinkRef(
            name=f"replica-{index}-pp{r}",
            kind=LinkKind.PP,
            rank=r,
            proxy=f"<stack>-replica-{index}-pp{r}" if p.links.pp_proxies else None,
        )
        for r in range(1, engine.pipeline_parallel_size)
    ]
    return links + _planned_kv_links(p, index)


def _planned_kv_links(p: StackConfig, index: int) -> list[LinkRef]:
    """A P/D worker's KV links (drill.stack.supervision.pd_plan names them), less the ``<stack>-`` prefix."""
    topology = p.topology
    if topology is None:
        return []
    prefill, decode = range(topology.prefill), range(topology.prefill, topology.prefill + topology.decode)
    pairs = [(index, d) for d in decode] if index in prefill else [(q, index) for q in prefill]
    proxied = topology.kv_transfer.proxies
    return [
        LinkRef(
            name=f"kv-p{q}-d{d}",
            kind=LinkKind.KV,
            rank=d if index == q else q,
            proxy=f"<stack>-kv-p{q}-d{d}" if proxied else None,
        )
        for q, d in pairs
    ]


def info_from_state(state: StackState, capabilities: frozenset[Capability]) -> TargetInfo:
    replicas = [
        ReplicaRef(
            name=r.name,
            index=r.index,
            url=r.url,
            direct_url=r.direct_url,
            admin_url=r.admin_url,
            admin_token=state.admin_token,
            container=r.container,
            pid=r.pid,
            pid_file=str(r.pid_file),
            proxy=r.proxy,
            links=[LinkRef(name=ln.name, kind=LinkKind(ln.kind), rank=ln.rank, proxy=ln.proxy) for ln in r.links],
            role=r.role,
        )
        for r in state.replicas
    ]
    metrics = {"router": f"{state.router}/metrics"}
    metrics.update({r.name: f"{r.direct_url}/metrics" for r in state.replicas})
    return TargetInfo(
        kind=EmbeddedStack.kind,
        base_url=state.router,
        model=state.model,
        runtime=state.runtime.value,
        replicas=replicas,
        toxiproxy_url=state.toxiproxy_url,
        router_admin_url=state.router_admin_url,
        admin_token=state.admin_token,
        metrics_urls=metrics,
        capabilities=capabilities,
    )
