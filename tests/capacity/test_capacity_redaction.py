"""``drill capacity --target DRILL`` redacts as ``drill run`` does: no file of the capacity run holds a secret.

The drill's ``openai`` target (the reference stack, started here) sends an ``api_key`` read from
``$DRILL_CAP_PASS`` and a literal ``X-Api-Key`` header. ``DRILL_CAP_PASS`` does not look secret by its name, yet
``env.json`` records every ``DRILL_*`` variable: only the run's redactor, told the target's header values, keeps
its value out. A secret-looking variable the drill never uses is planted too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from drill.rundir.redact import REDACTED

pytestmark = pytest.mark.integration

BEARER = "planted-bearer-3a9c5e"  # api_key: ${DRILL_CAP_PASS}
LITERAL = "planted-xapikey-8d2b4f"  # headers: {X-Api-Key: ...} in the drill file
ENV_SECRET = "planted-envsecret-6f1e"  # DRILL_CAP_SECRET_TOKEN, never referenced
PLANTED = (BEARER, LITERAL, ENV_SECRET)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    from drill.stack.config import parse_stack_config
    from drill.stack.supervision.launcher import start_stack, stop_stack

    state_dir = tmp_path_factory.mktemp("stack")
    config = parse_stack_config({"replicas": 1, "engine": {"weight_load_time": "200ms"}})
    state = start_stack(config, name="capacity-redaction", state_dir=state_dir, timeout_s=90)
    yield state
    stop_stack("capacity-redaction", state_dir=state_dir)


def _write_inputs(cwd: Path, url: str) -> None:
    scenario = {
        "name": "tiny",
        "seed": 3,
        "duration": "10s",
        "arrival": {"process": "poisson", "rate": 4},
        "pools": [
            {
                "name": "chat",
                "input_tokens": {"dist": "uniform", "min": 20, "max": 80},
                "output_tokens": {"dist": "fixed", "value": 16},
                "timeout": "5s",
                "slo": {"ttft_p95": "2s"},
            }
        ],
    }
    target = {"url": url, "api_key": "${DRILL_CAP_PASS}", "headers": {"X-Api-Key": LITERAL}}
    drill = {"name": "planted", "target": {"kind": "openai", "config": target}, "scenario": "scenario.yaml"}
    (cwd / "scenario.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False))
    (cwd / "drill.yaml").write_text(yaml.safe_dump(drill, sort_keys=False))


def test_a_capacity_run_writes_no_secret(stack, tmp_path: Path):
    _write_inputs(tmp_path, stack.router)
    env = {**os.environ, "DRILL_CAP_PASS": BEARER, "DRILL_CAP_SECRET_TOKEN": ENV_SECRET}
    args = ["capacity", "scenario.yaml", "--target", "drill.yaml", "--rates", "2", "--repetitions", "1"]
    args += ["--warmup", "0s", "--measure", "2s", "--tail", "0s", "--drain", "1s", "--no-naive"]
    done = subprocess.run(
        [sys.executable, "-m", "drill", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    (run_dir,) = (tmp_path / "reports" / "capacity").iterdir()
    files = sorted(p for p in run_dir.rglob("*") if p.is_file())
    names = {p.relative_to(run_dir).as_posix() for p in files}
    for expected in ("env.json", "journal.jsonl", "capacity.json", "capacity.md", "capacity.html", "watchdog.log"):
        assert expected in names, sorted(names)
    assert any(name.endswith("/requests.jsonl") for name in names), sorted(names)
    leaks = [(p.relative_to(run_dir).as_posix(), s) for p in files for s in PLANTED if s.encode() in p.read_bytes()]
    assert leaks == [], leaks
    recorded = json.loads((run_dir / "env.json").read_text())["environment"]
    assert recorded["DRILL_CAP_PASS"] == REDACTED  # recorded, its value scrubbed as a known secret
    assert recorded["DRILL_CAP_SECRET_TOKEN"] == REDACTED
