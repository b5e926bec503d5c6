"""``health_truth`` on hand-built run directories (health.jsonl beside the journal), and the prober that writes it."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from drill.api import Status
from drill.checks.health import HealthTruthCheck, HealthTruthParams, read_health
from drill.runner.health_probes import HealthProber
from drill.testing import CheckCase, run_check_contract
from tests.checks.rundir_kit import RunKit


def _check(**params) -> HealthTruthCheck:
    return HealthTruthCheck(HealthTruthParams(**params))


def _run(tmp_path: Path, *, says_broken: tuple[float, float] | None, name: str = "run") -> RunKit:
    """replica-1 broken from 40 s to 70 s (the fault); its probes every 0.5 s are unhealthy in ``says_broken``."""
    kit = RunKit(tmp_path / name)
    kit.phases(baseline=(0, 30), fault=(30, 80), recovery=(80, 120))
    kit.fault("crash-0", injected=40, reverted=70, kind="replica_crash")
    for step in range(240):
        at = step * 0.5
        bad = says_broken is not None and says_broken[0] <= at < says_broken[1]
        line = {"ts": kit.ts(at), "source": "replica-1", "healthy": not bad, "status": None if bad else 200}
        kit.raw_line("health.jsonl", json.dumps(line) + "\n")
        kit.raw_line("health.jsonl", json.dumps({"ts": kit.ts(at), "source": "replica-0", "healthy": True}) + "\n")
    return kit


def test_a_health_endpoint_that_follows_the_fault_passes(tmp_path: Path) -> None:
    verdict = _check(components=("replica-1",)).evaluate(_run(tmp_path, says_broken=(41, 72)).evidence())
    assert verdict.status is Status.PASS, verdict.message
    assert verdict.observed["crash-0.replica-1"] == {"detected_s": 1.0, "recovered_s": 2.0}


def test_a_health_endpoint_that_says_healthy_while_broken_fails(tmp_path: Path) -> None:
    evidence = _run(tmp_path, says_broken=None).evidence()
    verdict = _check(components=("replica-1",)).evaluate(evidence)
    assert verdict.status is Status.FAIL and "replica-1 said healthy in all 11 probe(s)" in verdict.message
    assert _check(components=("replica-0",)).evaluate(evidence).status is Status.FAIL  # not broken: a wrong name


def test_late_detection_and_late_or_no_recovery_fail(tmp_path: Path) -> None:
    late = _run(tmp_path, says_broken=(50, 72), name="late").evidence()
    assert _check(components=("replica-1",), detect_within="5s").evaluate(late).status is Status.FAIL
    assert _check(components=("replica-1",), detect_within="15s").evaluate(late).status is Status.PASS
    slow = _run(tmp_path, says_broken=(41, 110), name="slow").evidence()
    verdict = _check(components=("replica-1",), recover_within="30s").evaluate(slow)
    assert verdict.status is Status.FAIL and "40.0s after the revert" in verdict.message
    never = _run(tmp_path, says_broken=(41, 200), name="never").evidence()
    assert "never said healthy again" in _check(components=("replica-1",)).evaluate(never).message


def test_no_probe_no_component_no_fault_is_inconclusive(tmp_path: Path) -> None:
    evidence = _run(tmp_path, says_broken=(41, 72)).evidence()
    assert _check().evaluate(evidence).status is Status.INCONCLUSIVE
    assert _check(components=("replica-7",)).evaluate(evidence).status is Status.INCONCLUSIVE
    calm = RunKit(tmp_path / "calm")
    calm.phases(baseline=(0, 30), fault=(30, 60))
    assert _check(components=("replica-1",)).evaluate(calm.evidence()).status is Status.INCONCLUSIVE


def test_health_truth_keeps_the_contract(tmp_path: Path) -> None:
    runs = [
        (_run(tmp_path, says_broken=(41, 72), name="true").write(), Status.PASS),
        (_run(tmp_path, says_broken=None, name="lying").write(), Status.FAIL),
    ]
    case = CheckCase("health_truth", {"components": ["replica-1"]}, runs=runs)
    print(run_check_contract(case, tmp_path / "contract").lines())


class _Health(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(type(self).status)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.mark.integration
def test_the_prober_records_answers_and_refused_connections(tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/health"
    prober = HealthProber({"up": url, "down": "http://127.0.0.1:9/health"}, tmp_path / "health.jsonl", 0.1).start()
    try:
        time.sleep(0.35)
        _Health.status = 503
        time.sleep(0.3)
    finally:
        prober.stop()
        server.shutdown()
        _Health.status = 200
    probes = list(read_health(tmp_path / "health.jsonl"))
    up = [p for p in probes if p.source == "up"]
    assert up[0].healthy and up[0].status == 200 and not up[-1].healthy and up[-1].status == 503
    down = [p for p in probes if p.source == "down"]
    assert down and all(not p.healthy and p.status is None and p.error for p in down)
