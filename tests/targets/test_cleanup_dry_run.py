"""``drill cleanup --dry-run`` lists the proxies and the Toxiproxy server a dead run's harness made, from its journal
alone: nothing is contacted, nothing removed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from drill.rundir.journal import Event, Journal
from drill.targets.proxies import plan_proxies


def _dead_run(run_dir: Path) -> None:
    """A journal as a runner SIGKILLed after starting its openai target leaves it (the target never stopped)."""
    replicas = [("llama-0", "127.0.0.1:8080", None), ("llama-1", "127.0.0.1:8081", "127.0.0.1:9002")]
    plan = plan_proxies("20261201T000000Z-abc123", str(run_dir), replicas, None).reserve()
    assert plan.server is not None
    Path(plan.server.state_file).parent.mkdir(parents=True)
    Path(plan.server.state_file).write_text(json.dumps({"pid": 4242, "start_ticks": 7, "url": plan.url}))
    journal = Journal(run_dir / "journal.jsonl")
    journal.write(Event.RUN_STARTED, run_id=run_dir.name, pid=2**22 + 17, pid_start=None, drill="own-stack")
    journal.write(
        Event.TARGET_STARTING, target_id="target", target_kind="openai", teardown=plan.model_dump(mode="json")
    )
    journal.close()


def test_the_dry_run_lists_each_harness_proxy_and_the_harness_server(tmp_path: Path) -> None:
    run_dir = tmp_path / "reports" / "own-stack" / "20261201T000000Z-abc123"
    run_dir.mkdir(parents=True)
    _dead_run(run_dir)
    before = sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*"))
    done = subprocess.run(
        [sys.executable, "-m", "drill", "cleanup", "--run-dir", str(run_dir), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "400"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    server = json.loads((run_dir / "toxiproxy" / "server.json").read_text())["url"]
    lines = [line.split(": ", 1)[1] for line in done.stdout.splitlines()]
    assert lines == [
        "would tear down target target (openai)",
        f"  would remove proxy drill-20261201t000000z-abc123-llama-0 (-> 127.0.0.1:8080) of replica llama-0 on "
        f"{server}",
        "  would remove proxy drill-20261201t000000z-abc123-llama-1 (127.0.0.1:9002 -> 127.0.0.1:8081) of replica "
        f"llama-1 on {server}",
        f"  would stop the harness's Toxiproxy server on {server} (pid 4242)",
    ], done.stdout
    assert sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*")) == before  # nothing written
