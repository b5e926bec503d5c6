"""``drill load SCENARIO --target URL``: run production-shaped load alone and print what it measured.

``drill worker --master HOST:PORT``: a load worker for a ``drill load`` or ``drill run`` master on
another machine (the master is started with ``--expect-workers N --master-bind 0.0.0.0:PORT``).

Exit codes as everywhere (:mod:`drill.cli.common`): 0 done, 2 bad input (scenario diagnostics, a
non-loopback target without ``--allow-host``), 3 the load driver failed, 130 interrupted (the
partial summary is still printed).
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import click

from drill.cli.common import console, err_console, handle_errors, load_scenario_argument, parse_duration_option
from drill.errors import InputError, UnsafeTargetError

if TYPE_CHECKING:
    from drill.load.driver import LoadPlan, LoadSummary
    from drill.spec.scenario import Scenario

__all__ = ["load", "worker"]

DEFAULT_DURATION_S = 60.0


@click.command("load")
@click.argument("scenario_file")
@click.option("--target", required=True, help="Base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000.")
@click.option(
    "--duration",
    callback=parse_duration_option,
    help="How long arrivals run, e.g. 60s (default: the scenario's duration, else 60s).",
)
@click.option("--rate", help="Total arrival rate, e.g. 20 or '600/min': rescales every pool, keeping proportions.")
@click.option("--workers", type=int, default=0, show_default=True, help="Locust worker processes (0: one runner).")
@click.option(
    "--expect-workers",
    type=int,
    default=0,
    show_default=True,
    help="Also wait for this many remote `drill worker` processes.",
)
@click.option(
    "--master-bind",
    default="127.0.0.1:0",
    show_default=True,
    help="HOST:PORT the master listens on for workers (remote workers need a reachable address).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    help="Run directory (default: a new reports/load/<UTC time>-<id>).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--allow-host", "allow_hosts", multiple=True, help="Allow a non-loopback target host (repeatable).")
@click.option("--seed", type=int, help="Seed of the request set (default: the scenario's).")
@click.option("--model", help="Model name to request (default: the scenario's, else the first of /v1/models).")
@click.option("--header", "headers", multiple=True, metavar="'NAME: VALUE'", help="Extra request header (repeatable).")
@click.option(
    "--drain",
    callback=parse_duration_option,
    default="30s",
    show_default=True,
    help="At the end, how long in-flight requests may finish before they are cancelled.",
)
@click.option("--progress/--no-progress", default=None, help="Live status line (default: on a terminal).")
@click.option(
    "--tokenizer",
    metavar="server|words|file:PATH",
    help="Fit prompts to the target's tokenizer: its tokenize endpoint (server), a local tokenizer.json "
    "(file:PATH), or one token per word (words). Default: the scenario's tokenizer, else server.",
)
def load(
    scenario_file: str,
    target: str,
    duration: float | None,
    rate: str | None,
    workers: int,
    expect_workers: int,
    master_bind: str,
    out_dir: str | None,
    as_json: bool,
    allow_hosts: tuple[str, ...],
    seed: int | None,
    model: str | None,
    headers: tuple[str, ...],
    drain: float,
    progress: bool | None,
    tokenizer: str | None,
) -> None:
    """Run open-loop load from SCENARIO against --target and print latency, throughput, errors and goodput."""
    from drill.load.driver import LoadPlan

    with handle_errors():
        scenario, _ = load_scenario_argument(scenario_file)
        check_target(target, allow_hosts)
        _check_master(expect_workers, master_bind)
        length = duration or scenario.duration or DEFAULT_DURATION_S
        scenario = _with_rate(scenario, rate, length)
        _check_planned(scenario, length)
        _check_tokenizer(tokenizer)
        run_dir = Path(out_dir) if out_dir else _new_run_dir()
        plan = LoadPlan(
            scenario=scenario,
            target_url=target,
            model=model,
            duration_s=length,
            run_dir=run_dir,
            seed=scenario.seed if seed is None else seed,
            workers=workers,
            progress=sys.stderr.isatty() if progress is None else progress,
            headers=_headers(headers),
            expect_remote_workers=expect_workers,
            master_bind=master_bind,
            tokenizer=tokenizer,
        )
        interrupted, summary, t0 = _run(plan, drain)
        _print(plan, summary, t0, as_json)
    sys.exit(130 if interrupted else 0)


def check_target(url: str, allow_hosts: tuple[str, ...] | list[str]) -> None:
    """Refuse a target outside loopback unless its host is allowed (a typo must not aim load at production)."""
    from drill.runner.safety import is_loopback

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"--target must be an http(s) URL such as http://127.0.0.1:8000, got {url!r}")
    host = parts.hostname
    if not is_loopback(host) and host.lower() not in {h.lower() for h in allow_hosts}:
        raise UnsafeTargetError(host, "--target")


def _check_master(expect_workers: int, master_bind: str) -> None:
    host, sep, port = master_bind.rpartition(":")
    if not sep or not port.isdigit():
        raise InputError(f"--master-bind expects HOST:PORT, got {master_bind!r}")
    if expect_workers and int(port) == 0:
        raise InputError(
            "--expect-workers needs a fixed port in --master-bind (e.g. 0.0.0.0:5557) so remote "
            "workers can reach the master"
        )
    if expect_workers:
        err_console.print(
            f"waiting for {expect_workers} remote worker(s): run `drill worker --master <this host>:{port}` on each",
            highlight=False,
        )


def _with_rate(scenario: Scenario, rate: str | None, duration_s: float) -> Scenario:
    if rate is None:
        return scenario
    from drill.load.schedule import with_total_rate
    from drill.spec.scenario import parse_rate

    try:
        value = parse_rate(float(rate) if rate.replace(".", "", 1).isdigit() else rate)
    except ValueError as exc:
        raise InputError(f"--rate: {exc}") from exc
    if value <= 0:
        raise InputError(f"--rate must be positive, got {rate!r}")
    return with_total_rate(scenario, value, duration_s)


def _check_planned(scenario: Scenario, duration_s: float) -> None:
    from drill.spec.scenario import planned_load_problem

    problem = planned_load_problem(scenario, duration_s)
    if problem:
        raise InputError(problem, hint="lower --rate or the scenario's rates, or shorten --duration")


def _check_tokenizer(value: str | None) -> None:
    """A bad ``--tokenizer`` is refused before anything starts (exit 2)."""
    if value is not None:
        from drill.load.tokenizing import TokenizerChoice

        choice = TokenizerChoice.parse(value)
        if choice.path is not None and not choice.path.is_file():
            raise InputError(f"--tokenizer: {choice.path} is not a file", hint="give the path of a tokenizer.json")


def _headers(raw: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in raw:
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            raise InputError(f"--header expects 'Name: value', got {item!r}")
        out[name.strip()] = value.strip()
    return out


def _new_run_dir() -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = Path("reports") / "load" / f"{stamp}-{secrets.token_hex(3)}"
    path.mkdir(parents=True, exist_ok=False)
    return path


def _run(plan: LoadPlan, drain_s: float) -> tuple[bool, LoadSummary, float | None]:
    """Start, wait out the duration (Ctrl-C stops early), stop; returns (interrupted, summary, t0)."""
    from drill.load.driver import LoadDriver

    driver = LoadDriver(plan)
    driver.start(timeout_s=660 if plan.expect_remote_workers else 60)
    interrupted = False
    try:
        end = time.monotonic() + ((driver.t0 or time.time()) + plan.duration_s - time.time())
        while time.monotonic() < end and driver.alive():
            time.sleep(min(0.2, max(0.0, end - time.monotonic())))
    except KeyboardInterrupt:
        interrupted = True
        err_console.print("interrupted: stopping load (in-flight requests drain)")
    summary = driver.stop(drain_s=drain_s)
    return interrupted, summary, driver.t0


def _print(plan: LoadPlan, summary: LoadSummary, t0: float | None, as_json: bool) -> None:
    from drill.load.summary import render_text, summarize
    from drill.load.tokenizing import read_fit
    from drill.rundir.records import read_records

    slos = {p.name: dict(p.slo) for p in plan.scenario.pools if p.slo}
    report = summarize(
        read_records(plan.run_dir / "requests.jsonl"), slos=slos, duration_s=plan.duration_s, start_ts=t0
    )
    fit = read_fit(plan.run_dir)
    shortfall = summary.shortfall()
    doc = {
        "run_dir": str(plan.run_dir),
        "load": summary.to_dict(),
        "shortfall": shortfall,
        "report": report.to_dict(),
        "prompts": fit.summary() if fit is not None else None,
    }
    (plan.run_dir / "load-summary.json").write_text(json.dumps(doc, indent=2) + "\n")
    if shortfall is not None:  # on stderr in both modes: the JSON on stdout stays one document
        err_console.print(f"warning: {shortfall}", highlight=False, soft_wrap=True)
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    console.print(render_text(report), highlight=False, soft_wrap=True)
    if fit is not None:
        warned = fit.warning is not None or bool(fit.unfit)
        (err_console if warned else console).print(fit.describe(), highlight=False, soft_wrap=True)
    console.print(
        f"sent {summary.sent} of {summary.due} arrivals due (target {summary.target_rate:.2f}/s, achieved "
        f"{summary.achieved_rate:.2f}/s), client drops {summary.client_drops}, cancelled at stop "
        f"{summary.cancelled}, records {summary.records_written} (lost {summary.records_lost})",
        highlight=False,
        soft_wrap=True,
    )
    if summary.unreadable_messages:
        err_console.print(
            f"{len(summary.unreadable_messages)} message(s) from the load generator could not be "
            f"read (their counters are lost): {'; '.join(summary.unreadable_messages[:3])}",
            highlight=False,
            soft_wrap=True,
        )
    console.print(f"run directory: {plan.run_dir}", highlight=False, soft_wrap=True)


@click.command("worker")
@click.option(
    "--master", required=True, metavar="HOST:PORT", help="The master's address (printed by its `drill load`)."
)
def worker(master: str) -> None:
    """Run a load worker for a master on another machine; it gets the plan and its share from the master."""
    host, sep, port = master.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise click.BadParameter(f"expected HOST:PORT, got {master!r}", param_hint="--master")
    cmd = [sys.executable, "-m", "drill.load.child.locustfile", "--worker", "--master", f"{host}:{port}"]
    os.execv(sys.executable, cmd)  # a fresh process: Locust must be its first import
