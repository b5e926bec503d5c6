"""``drill fault inject`` refuses a Toxiproxy fault on a replica that gives ``upstream``: its proxy is made by the
harness for the length of a ``drill run`` only, so outside one there is nothing to put a toxic on. The refusal is
located at the replica's ``upstream``, exits 2 and touches nothing; a replica with a hand-made proxy is not refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

REPLICAS = [
    {"name": "llama-0", "url": "http://127.0.0.1:9", "proxy": "llama-0"},  # a hand-made proxy
    {"name": "llama-1", "upstream": "127.0.0.1:9", "pid_file": "/nonexistent/llama-1.pid"},
]


def _inject(tmp_path: Path, replica: str) -> tuple[Path, subprocess.CompletedProcess]:
    config = {"url": "http://127.0.0.1:9", "toxiproxy_url": "http://127.0.0.1:9", "replicas": REPLICAS}
    drill = tmp_path / "own-stack.yaml"
    drill.write_text(yaml.safe_dump({"name": "x", "target": {"kind": "openai", "config": config}}, sort_keys=False))
    argv = [sys.executable, "-m", "drill", "fault", "inject", "slow_replica", "--param", "latency_ms=300"]
    argv += ["--selector", f"replicas=[{replica}]", "--target", str(drill), "--for", "1s"]
    argv += ["--out", str(tmp_path / "reports")]
    return drill, subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60)


def test_a_toxiproxy_fault_on_a_harness_made_proxy_is_refused_where_upstream_is_given(tmp_path: Path) -> None:
    drill, done = _inject(tmp_path, "llama-1")
    assert done.returncode == 2, done.stdout + done.stderr
    line = next(n for n, text in enumerate(drill.read_text().splitlines(), 1) if "upstream:" in text)
    assert f"own-stack.yaml:{line}:" in done.stderr, done.stderr
    assert "target.config.replicas[1].upstream: replica 'llama-1'" in done.stderr
    assert "during a `drill run` only" in done.stderr and "hint:" in done.stderr
    assert not (tmp_path / "reports").exists()


def test_a_replica_with_a_hand_made_proxy_is_not_refused(tmp_path: Path) -> None:
    _, done = _inject(tmp_path, "llama-0")  # no Toxiproxy answers at :9, so the fault cannot land: exit 1
    assert done.returncode == 1, done.stdout + done.stderr
    assert "upstream" not in done.stdout + done.stderr
