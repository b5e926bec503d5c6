"""Start, find and stop the embedded reference stack (stack-contracts.md §9).

Called by ``drill stack up/status/down`` and by the harness when a drill's target is the
embedded stack. :func:`start_stack` decides the layout (:func:`drill.stack.supervision.stack_plan.build_plan`),
writes launches and the plan under the run directory, starts the supervisor detached and returns
once the router and every replica answer — as themselves: each admin API must take this stack's admin token
and name the part the plan put at that port. Ports are picked free and released before the processes bind them
(:mod:`drill.stack.supervision.ports`), so another process — a stack started at the same moment — can take one
in between; its server would then answer this stack's health checks and serve its requests. An answer that
refuses this stack's token is such a server: the stack is stopped and started again on other ports
(:data:`START_TRIES` in all). :func:`stop_stack` is idempotent and leaves nothing
running: it stops the supervisor (which stops its children), kills anything left in the
supervisor's process group, removes the stack's containers (by label) and proxies (by name).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from drill.backends.toxiproxy import ToxiproxyClient, find_toxiproxy_binary
from drill.errors import DockerError, StackError, ToxiproxyError
from drill.stack.config import Runtime, StackConfig
from drill.stack.supervision.stack_plan import StackPlan, build_plan
from drill.stack.supervision.state import StackState, read_state, remove_state, run_dir, validate_name, write_state

__all__ = ["read_state", "start_stack", "stop_stack", "supervisor_alive"]

_POLL_S = 0.1
#: Starts of a stack, each on freshly picked ports, when another server holds one of its ports.
START_TRIES = 3
_started: dict[int, subprocess.Popen[bytes]] = {}  # supervisors this process started, reaped on stop


def start_stack(
    config: StackConfig,
    *,
    name: str = "default",
    runtime: str | Runtime | None = None,
    otlp_endpoint: str | None = None,
    state_dir: Path | None = None,
    timeout_s: float = 120,
) -> StackState:
    """Start stack ``name`` and return its state once every part answers.

    ``runtime`` overrides ``config.runtime``. Raises StackError when a stack of that name is
    running, or when the stack does not come up within ``timeout_s`` (the stack is then stopped
    and the error quotes the supervisor's log); NotAvailableError / DockerError when Toxiproxy
    or the Docker engine is missing.
    """
    validate_name(name)
    runtime = Runtime(runtime) if runtime is not None else config.runtime
    _clear_previous(name, state_dir)
    toxiproxy_url = os.environ.get("TOXIPROXY_URL") or None
    if toxiproxy_url is None:
        find_toxiproxy_binary()
    if runtime is Runtime.DOCKER:
        _check_docker()
    deadline = time.monotonic() + timeout_s
    taken: PortTakenError | None = None
    for _ in range(START_TRIES):
        plan = build_plan(  # each start on ports picked afresh
            config,
            name=name,
            runtime=runtime,
            state_dir=state_dir,
            otlp_endpoint=otlp_endpoint,
            toxiproxy_url=toxiproxy_url,
        )
        try:
            return _start(plan, state_dir, deadline)
        except PortTakenError as error:  # another server holds one of its ports: stopped; start again on others
            taken = error
    raise StackError(
        f"the stack {name!r} could not start: {taken} (on each of {START_TRIES} sets of free ports)",
        hint="another program keeps taking the ports this stack picks; stop it, or retry",
    ) from taken


def _start(plan: StackPlan, state_dir: Path | None, deadline: float) -> StackState:
    """One start of ``plan``: its state once every part answers; the stack stopped again when it does not."""
    name = plan.state.name
    _write_plan(plan)
    supervisor = _spawn_supervisor(plan)
    state = plan.state.model_copy(update={"supervisor_pid": supervisor.pid})
    write_state(state, state_dir)
    try:
        _wait_ready(plan, supervisor, deadline)
    except BaseException:
        stop_stack(name, state_dir=state_dir)
        raise
    state = state.model_copy(
        update={"replicas": tuple(r.model_copy(update={"pid": _read_pid(r.pid_file)}) for r in state.replicas)}
    )
    write_state(state, state_dir)
    return state


def stop_stack(name: str = "default", *, state_dir: Path | None = None, timeout_s: float = 30) -> bool:
    """Stop stack ``name``; returns True when something was running or left behind.

    Idempotent: a second call finds nothing and returns False.
    """
    validate_name(name)
    try:
        state = read_state(name, state_dir)
    except StackError:
        state = None
    found = False
    if state is not None and state.supervisor_pid and supervisor_alive(state):
        _stop_supervisor(state.supervisor_pid, timeout_s)
        found = True
    if state is not None and state.supervisor_pid:
        found |= _kill_group(state.supervisor_pid)
    if state is None or state.runtime is Runtime.DOCKER:
        found |= _remove_containers(name)
    if state is not None and not state.toxiproxy_owned:
        found |= _remove_proxies(state)
    return remove_state(name, state_dir) or found


def supervisor_alive(state: StackState) -> bool:
    """True while the stack's supervisor process runs (checked by pid *and* command line)."""
    pid = state.supervisor_pid
    if not pid:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        status = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return status != "Z" and "drill.stack.supervision.supervisor" in cmdline and str(state.run_dir) in cmdline


# -- start ------------------------------------------------------------------------------------


def _clear_previous(name: str, state_dir: Path | None) -> None:
    try:
        previous = read_state(name, state_dir)
    except StackError:
        previous = None
    if previous is not None and supervisor_alive(previous):
        raise StackError(
            f"a stack named {name!r} is already running (router {previous.router})",
            hint=f"stop it with `drill stack down --name {name}`, or pick another --name",
        )
    stop_stack(name, state_dir=state_dir)  # leftovers of a stack that died
    shutil.rmtree(run_dir(name, state_dir), ignore_errors=True)


def _check_docker() -> None:
    # lazy: the Docker SDK (~0.3 s to import) loads only for a stack of containers
    from drill.backends.docker import DockerBackend

    DockerBackend(timeout_s=10).close()


def _write_plan(plan: StackPlan) -> None:
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    for launch in plan.replica_launches:
        plan.launch_path(launch.name).write_text(launch.model_dump_json(indent=2), encoding="utf-8")
    plan.launch_path("router").write_text(plan.router_launch.model_dump_json(indent=2), encoding="utf-8")
    plan.plan_path.write_text(plan.model_dump_json(indent=2), encoding="utf-8")


def _spawn_supervisor(plan: StackPlan) -> subprocess.Popen[bytes]:
    with open(plan.run_dir / "supervisor.log", "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "drill.stack.supervision.supervisor", "--plan", str(plan.plan_path)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    _started[process.pid] = process
    return process


def _wait_ready(plan: StackPlan, supervisor: subprocess.Popen[bytes], deadline: float) -> None:
    """Poll until the supervisor says ``ready`` and the router sees every replica healthy."""
    with httpx.Client(timeout=2.0, trust_env=False) as http:
        while time.monotonic() < deadline:
            status = _supervisor_status(plan)
            if supervisor.poll() is not None or status == "failed":
                raise StackError(f"the stack {plan.state.name!r} failed to start", hint=_log_tail(plan))
            if status == "ready" and _all_healthy(http, plan):
                return
            time.sleep(_POLL_S)
    raise StackError(
        f"the stack {plan.state.name!r} did not become ready in time",
        hint=f"increase the timeout, or read the logs in {plan.run_dir}. {_log_tail(plan)}",
    )


def _supervisor_status(plan: StackPlan) -> str | None:
    try:
        return json.loads(plan.status_path.read_text(encoding="utf-8")).get("state")
    except (FileNotFoundError, ValueError):
        return None


class PortTakenError(StackError):
    """Another server answers at a port the plan gave this stack: its admin API refuses this stack's token."""


def _all_healthy(http: httpx.Client, plan: StackPlan) -> bool:
    """The router and every replica answer, each as itself (:func:`_own`), and the router sees every replica
    healthy. Raises :class:`PortTakenError` when a port of the plan is answered by another server."""
    headers = {"Authorization": f"Bearer {plan.state.admin_token}"}
    try:
        router = http.get(f"{plan.state.router_admin_url}/state", headers=headers)
        if not _own(router, plan.state.router_admin_url, None):
            return False
        for replica in plan.state.replicas:
            answer = http.get(f"{replica.admin_url}/admin/state", headers=headers)
            if (
                not _own(answer, replica.admin_url, replica.name)
                or http.get(f"{replica.direct_url}/health").status_code != 200
            ):
                return False
        state = router.json()
    except (httpx.HTTPError, ValueError):
        return False
    return all(r.get("healthy") for r in state.get("replicas", []))


def _own(answer: httpx.Response, url: str, name: str | None) -> bool:
    """Whether an admin API's answer (``GET /state`` with this stack's token) is from the part of this stack at
    ``url``: it takes the token and, for a replica, gives ``name``. A 401 is another server (another stack's: its
    token differs); a 403 is an admin API that does not count this client as local (a container's), whose health
    the other checks judge."""
    if answer.status_code == 401:
        raise PortTakenError(f"{url} is answered by another server (it refuses this stack's admin token)")
    if answer.status_code == 403:
        return True
    if answer.status_code != 200:
        return False
    named = answer.json().get("name")
    if name is not None and named != name:
        raise PortTakenError(f"{url} is answered by {named!r}, not {name!r}")
    return True


def _log_tail(plan: StackPlan, lines: int = 15) -> str:
    try:
        text = (plan.run_dir / "supervisor.log").read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return "no supervisor log was written"
    tail = "\n    ".join(text.strip().splitlines()[-lines:])
    return f"supervisor log ({plan.run_dir / 'supervisor.log'}):\n    {tail}"


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="utf-8").strip())
    except (FileNotFoundError, ValueError):
        return None


# -- stop -------------------------------------------------------------------------------------


def _gone(pid: int) -> bool:
    process = _started.get(pid)
    if process is not None:
        if process.poll() is None:
            return False
        _started.pop(pid, None)
        return True
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, IndexError):
        return True


def _stop_supervisor(pid: int, timeout_s: float) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(_POLL_S)


def _group_members(pgid: int) -> list[int]:
    """Live processes of group ``pgid`` that are the stack's own (by command line): a reused pid
    heading someone else's group is never touched."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        ours = b"drill.stack." in cmdline or b"toxiproxy-server" in cmdline
        if int(fields[2]) == pgid and fields[0] != "Z" and ours:
            members.append(int(entry.name))
    return members


def _kill_group(pgid: int) -> bool:
    """SIGKILL whatever of the stack is left in the supervisor's process group."""
    members = _group_members(pgid)
    for pid in members:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5
    while any(not _gone(pid) for pid in members) and time.monotonic() < deadline:
        time.sleep(0.05)
    return bool(members)


def _remove_containers(name: str) -> bool:
    # lazy: the Docker SDK (~0.3 s to import) loads only for a stack of containers
    from drill.backends.docker import DockerBackend
    from drill.stack.supervision.docker_runtime import remove_stack_containers

    try:
        with DockerBackend(timeout_s=10) as backend:
            return remove_stack_containers(backend, name) > 0
    except DockerError:
        return False  # no engine: nothing of ours can run there


def _remove_proxies(state: StackState) -> bool:
    prefix = f"{state.name}-replica-"
    try:
        with ToxiproxyClient(state.toxiproxy_url) as client:
            ours = [n for n in client.proxies() if n.startswith(prefix)]
            for proxy in ours:
                client.delete_proxy(proxy)
    except ToxiproxyError:
        return False
    return bool(ours)
