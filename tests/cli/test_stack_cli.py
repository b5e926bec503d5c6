"""``drill stack up/status/down`` through the CLI: endpoints printed and stored, ``down``
idempotent and leaving no process, container or proxy behind."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from drill.cli.main import cli
from tests.stack.stack_probes import group_members, wait_until

pytestmark = [pytest.mark.integration]

CONFIG = """\
replicas: 1
engine:
  tensor_parallel_size: 2
  weight_load_time: 200ms
"""


def test_up_status_down(tmp_path: Path) -> None:
    config = tmp_path / "stack.yaml"
    config.write_text(CONFIG)
    common = ["--name", "cli", "--state-dir", str(tmp_path)]
    runner = CliRunner()
    up = runner.invoke(cli, ["stack", "up", "--config", str(config), "--json", *common])
    try:
        assert up.exit_code == 0, up.output
        started = json.loads(up.output[up.output.index("{") :])
        assert started["router"].startswith("http://127.0.0.1:")
        (replica,) = started["replicas"]
        assert replica["url"] and replica["admin_url"] and replica["links"][0]["kind"] == "tp"
        assert httpx.get(f"{started['router']}/health", trust_env=False).status_code == 200

        status = runner.invoke(cli, ["stack", "status", "--json", *common])
        assert status.exit_code == 0 and json.loads(status.output)["router"] == started["router"]
        assert json.loads(status.output)["running"] is True
        text = runner.invoke(cli, ["stack", "status", *common])
        assert text.exit_code == 0 and started["router"] in text.output and "tp rank 1" in text.output

        processes = group_members(started["supervisor_pid"])
        assert len(processes) >= 5  # supervisor, toxiproxy, router, replica, its TP rank
        with httpx.Client(trust_env=False) as client:
            proxies = client.get(f"{started['toxiproxy_url']}/proxies").json()
        assert set(proxies) == {"cli-replica-0", "cli-replica-0-tp1"}
    finally:
        down = runner.invoke(cli, ["stack", "down", *common])
    assert down.exit_code == 0 and "stopped" in down.output
    wait_until(lambda: not group_members(started["supervisor_pid"]), 5, "every stack process to end")
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{started['toxiproxy_url']}/proxies", trust_env=False)
    assert not (tmp_path / "stack" / "cli.json").exists()

    again = runner.invoke(cli, ["stack", "down", *common])
    assert again.exit_code == 0 and "nothing to stop" in again.output
    gone = runner.invoke(cli, ["stack", "status", "--json", *common])
    assert gone.exit_code == 1 and json.loads(gone.output)["running"] is False


def test_up_with_a_bad_config_says_where(tmp_path: Path) -> None:
    config = tmp_path / "stack.yaml"
    config.write_text("replicas: 0\nengine: {tensor_parallel_sise: 2}\n")
    result = CliRunner().invoke(cli, ["stack", "up", "--config", str(config), "--state-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "replicas" in result.output and "tensor_parallel_sise" in result.output
