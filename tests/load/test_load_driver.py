"""The driver end to end against a real SSE server process (``bench/sse_server.py``).

Each test starts the real Locust child process (and so takes a few seconds): records against
the server's own log, trace/idempotency headers, error classes and retries, client drops,
drain and cancel at stop, bursts, and the child dying with the harness.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from loadkit import run_load, scenario, wall_chunks

from drill.errors import InputError
from drill.load.driver import spawn_generator
from drill.load.live_status import LiveProgress, format_status
from drill.rundir.records import ErrorClass
from drill.stats import percentile

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


def test_records_match_the_server_log_chunk_for_chunk(sse_server, tmp_path: Path) -> None:
    seen = []

    def watch(driver) -> None:  # the live status line's figures, as a terminal would show them
        progress = LiveProgress(driver, tmp_path / "run" / "requests.jsonl")
        for _ in range(4):
            time.sleep(0.45)
            seen.append(progress.snapshot())

    run = run_load(sse_server.url, scenario(30, out=10, priority=0), 2.0, tmp_path / "run", during=watch)
    assert seen[-1].target_rate > 10 and seen[-1].achieved_rate > 10 and seen[-1].ttft_p50 is not None
    assert seen[-1].in_flight >= 0 and seen[-1].errors == {} and "rate" in format_status(seen[-1])
    log = {e["request_id"]: e for e in sse_server.log()}
    s = run.summary
    assert s.scheduled == s.due == s.sent == s.ok == s.records_written == len(run.records) == len(log) > 30
    assert s.records_lost == 0 and s.errors == {} and s.client_drops == 0 and s.shortfall() is None
    errors_ms = []
    for record in run.records:
        entry = log[record.request_id]
        assert record.ok and record.completion_tokens == 10 and record.prompt_tokens == 50 - 8
        assert entry["traceparent"].split("-")[1] == record.trace_id
        assert entry["idempotency_key"] == record.idempotency_key == record.request_id.rsplit("-", 1)[0]
        assert entry["priority"] == "0" and "sha256:" + entry["body_sha256"] == record.payload_digest
        client = wall_chunks(record)
        assert len(client) == 11 and len(entry["sends"]) == 10  # role chunk + 10 tokens
        errors_ms += [(c - sent) * 1000 for c, sent in zip(client[1:], entry["sends"])]
        assert record.ttft_ms == pytest.approx((client[0] - record.intended_ts) * 1000, abs=0.01)
        assert record.schedule_lag_ms is not None and record.schedule_lag_ms >= 0
        assert record.e2e_ms >= record.chunk_offsets_ms[-1]
    assert min(errors_ms) > -0.5  # nobody reads a chunk before it was sent
    assert percentile(errors_ms, 50) < 5.0  # loose: the machine is shared (bench/ measures it)
    assert percentile([r.schedule_lag_ms for r in run.records], 50) < 10.0


@pytest.mark.parametrize(
    "settings,pool,expected",
    [
        ({"fail_status": 503, "fail_every": 2}, {"retry": {"attempts": 2, "backoff": "10ms"}}, ErrorClass.REFUSED),
        ({"midstream_error_after": 3}, {}, ErrorClass.MID_STREAM_ERROR),
        ({"midstream_error_after": 0, "midstream_error_code": 503}, {}, ErrorClass.REFUSED),  # vLLM's 200 + 503 event
        (
            {"cut_after": 2},
            {"retry": {"attempts": 1, "backoff": "10ms", "on": ["connection"]}},
            ErrorClass.CONNECTION_RESET,
        ),
        ({"hang_headers": 1.5}, {"timeout": "400ms"}, ErrorClass.TIMEOUT),
    ],
)
def test_error_classes_retries_and_failing_samples(
    sse_server, tmp_path: Path, settings: dict, pool: dict, expected: ErrorClass
) -> None:
    sse_server.configure(**settings)
    run = run_load(sse_server.url, scenario(10, out=5, **pool), 1.0, tmp_path / "run", drain_s=5)
    failed = [r for r in run.records if r.error is not None]
    assert failed and {r.error for r in failed} == {expected}
    assert run.summary.errors == {expected.value: len(failed)}
    assert {s.request_id for s in run.samples} == {r.request_id for r in failed}
    if settings.get("midstream_error_code") == 503:
        assert {(r.status, r.stream_error_code, r.retry_after_s, r.ttft_ms) for r in failed} == {(200, 503, None, None)}
    for sample in run.samples:
        assert sample.error == expected.value and sample.headers["X-Request-Id"] == sample.request_id
        assert "sha256:" + __import__("hashlib").sha256(sample.body).hexdigest() == sample.payload_digest
    retries = [r for r in run.records if r.attempt > 1]
    if pool.get("retry"):
        assert retries
        for retry in retries:
            first = next(r for r in run.records if r.logical_id == retry.logical_id and r.attempt == 1)
            assert retry.idempotency_key == first.idempotency_key and retry.payload_digest == first.payload_digest
            assert retry.trace_id != first.trace_id and retry.request_id != first.request_id
            assert retry.intended_ts > first.intended_ts
    else:
        assert not retries


def test_a_timed_out_connection_is_never_reused(sse_server, tmp_path: Path) -> None:
    """After client timeouts, late responses must not be read as the answers of later requests."""
    sse_server.configure(hang_headers=0.6)
    sc = scenario(20, timeout="300ms", output_tokens={"dist": "uniform", "min": 3, "max": 40})

    def heal(driver) -> None:
        time.sleep(1.0)
        sse_server.configure(hang_headers=0)

    run = run_load(sse_server.url, sc, 3.0, tmp_path / "run", during=heal)
    ok = [r for r in run.records if r.ok]
    assert any(r.error is ErrorClass.TIMEOUT for r in run.records) and len(ok) > 20
    for record in ok:  # the usage of the response read must be this request's own
        assert record.completion_tokens == record.planned_output_tokens


def test_arrivals_beyond_the_in_flight_cap_are_dropped_not_delayed(start_sse_server, tmp_path: Path) -> None:
    server = start_sse_server(gap_ms=50)
    sc = scenario(40, out=20).model_copy(update={"max_in_flight": 3})
    run = run_load(server.url, sc, 1.0, tmp_path / "run")
    drops = [r for r in run.records if r.error is ErrorClass.CLIENT_DROP]
    assert run.summary.client_drops == len(drops) > 10
    assert all(r.sent_ts is None and r.schedule_lag_ms is None for r in drops)
    assert run.summary.sent + run.summary.client_drops == run.summary.due == run.summary.scheduled
    spans = sorted((e["arrival_ts"], e["finish_ts"]) for e in server.log())
    most = max(sum(1 for a, b in spans if a <= start < b) for start, _ in spans)
    assert most <= 3


def test_stop_drains_then_cancels_and_records_the_rest(start_sse_server, tmp_path: Path) -> None:
    server = start_sse_server(gap_ms=100)
    t0 = time.monotonic()
    run = run_load(server.url, scenario(10, out=60), 1.0, tmp_path / "run", drain_s=0.5)
    took = time.monotonic() - t0
    cancelled = [r for r in run.records if r.error is ErrorClass.CANCELLED]
    assert run.summary.cancelled == len(cancelled) == run.summary.sent > 3
    assert all(r.chunk_offsets_ms for r in cancelled) and not run.samples
    assert run.summary.records_written == len(run.records)
    assert took < 15


def test_bursts_add_poisson_arrivals_with_longer_prompts(sse_server, tmp_path: Path) -> None:
    statuses = {}

    def burst(driver) -> None:
        with pytest.raises(InputError, match="unknown pools"):
            driver.control.start_burst("x", rate_multiplier=2, prompt_multiplier=1, pools=["nope"])
        time.sleep(0.5)
        driver.control.start_burst("flood-1", rate_multiplier=4, prompt_multiplier=3, pools=["chat"])
        time.sleep(2.0)
        statuses["during"] = driver.control.burst_status("flood-1")
        driver.control.end_burst("flood-1")
        driver.control.end_burst("flood-1")
        driver.control.end_burst("never-started")
        time.sleep(0.3)
        statuses["after"] = driver.control.burst_status("flood-1")
        statuses["unknown"] = driver.control.burst_status("never-started")

    run = run_load(sse_server.url, scenario(20, inp=40, out=3), 3.5, tmp_path / "run", during=burst)
    bursty = [r for r in run.records if r.burst == "flood-1"]
    assert statuses["during"]["active"] == 1 and statuses["during"]["offered_rate"] == pytest.approx(60, rel=0.01)
    assert statuses["after"]["active"] == 0 and statuses["after"]["sent"] == len(bursty)
    assert statuses["unknown"] == {"active": 0.0, "sent": 0.0, "offered_rate": 0.0}
    assert 60 < len(bursty) < 200  # 60/s for ~2 s
    assert all(r.planned_input_tokens == 120 and r.prompt_tokens == 120 - 8 for r in bursty if r.ok)
    scheduled = [r for r in run.records if r.burst is None]
    assert len(scheduled) == run.summary.scheduled


_HARNESS = """
import sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
from loadkit import scenario
from drill.load.driver import LoadDriver, LoadPlan
driver = LoadDriver(LoadPlan(scenario=scenario(20), target_url={url!r}, model=None, duration_s=60,
                             run_dir=Path({run_dir!r}), seed=1, workers={workers}))
driver.start()
print(driver._proc.pid, flush=True)
time.sleep(120)
"""


def _wait_for_requests(server, more_than: int, timeout_s: float) -> None:
    """Until the server has logged more than `more_than` requests: workers that start late on a loaded machine."""
    deadline = time.monotonic() + timeout_s
    while len(server.log()) <= more_than:
        assert time.monotonic() < deadline, f"{len(server.log())} requests in {timeout_s} s"
        time.sleep(0.1)


@pytest.mark.parametrize("workers", [0, 2])
def test_load_dies_with_a_sigkilled_harness(sse_server, tmp_path: Path, workers: int) -> None:
    """The harness is SIGKILLed: its child sees the control socket close; workers die by PR_SET_PDEATHSIG."""
    code = _HARNESS.format(
        tests=str(Path(__file__).parent), url=sse_server.url, run_dir=str(tmp_path / "run"), workers=workers
    )
    harness = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        child = int(harness.stdout.readline())
        generators = _children(child) if workers else [child]
        assert len(generators) == max(1, workers)
        _wait_for_requests(sse_server, more_than=5, timeout_s=30)  # load is flowing before the harness dies
        harness.send_signal(signal.SIGKILL)
        harness.wait(timeout=10)
        deadline = time.monotonic() + 5
        while any(_alive(p) for p in [child, *generators]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(p) for p in [child, *generators])
        seen = len(sse_server.log())
        time.sleep(1.0)
        assert len(sse_server.log()) == seen  # no load after the harness died
    finally:
        if harness.poll() is None:
            harness.kill()


def test_a_remote_worker_joins_with_drill_worker(sse_server, tmp_path: Path) -> None:
    """``drill worker --master HOST:PORT``: the path a worker on another machine takes."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    worker = subprocess.Popen(
        [sys.executable, "-m", "drill", "worker", "--master", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        run = run_load(
            sse_server.url,
            scenario(20, out=3),
            1.5,
            tmp_path / "run",
            expect_remote_workers=1,
            master_bind=f"127.0.0.1:{port}",
        )
        assert run.summary.workers == 1 and run.summary.records_lost == 0
        assert len(run.records) == run.summary.scheduled > 10 and {r.worker for r in run.records} == {"w0"}
        assert worker.wait(timeout=15) == 0  # it leaves when the master quits
    finally:
        if worker.poll() is None:
            worker.kill()


def test_a_generator_spawned_ahead_is_taken_over_and_runs_the_load(sse_server, tmp_path: Path) -> None:
    """The runner spawns the generator while the target starts (Locust's import off the run's critical path):
    the driver sends that process its plan instead of starting another."""
    generator = spawn_generator(tmp_path / "run")
    time.sleep(0.3)  # still waiting for a plan: the target has not started yet
    assert generator.proc.poll() is None
    run = run_load(sse_server.url, scenario(20, out=3), 1.0, tmp_path / "run", generator=generator)
    assert run.summary.records_lost == 0 and len(run.records) == run.summary.scheduled > 5
    assert generator.proc.poll() == 0  # it ran the load and exited when stopped: no second generator ran it


def test_a_generator_for_another_run_directory_is_closed_and_replaced(sse_server, tmp_path: Path) -> None:
    generator = spawn_generator(tmp_path / "other")
    run = run_load(sse_server.url, scenario(20, out=3), 1.0, tmp_path / "run", generator=generator)
    assert run.summary.records_lost == 0 and len(run.records) == run.summary.scheduled > 5
    assert generator.proc.wait(timeout=10) == 2  # its channel closed before a plan came
    assert not (tmp_path / "other" / "requests.jsonl").exists()


def _children(pid: int) -> list[int]:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            kids = [int(k) for k in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        except OSError:
            kids = []
        if kids:
            return kids
        time.sleep(0.05)
    return []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie child of a dead parent is reaped by init; treat <defunct> as gone
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return False


_USER_STOPPED = """
import json, sys, time
sys.path.insert(0, {tests!r})
from loadkit import scenario
from drill.load.child.locustfile import LocalController
from drill.load.control import GeneratorPlan
import gevent
sc = scenario(20, out=2)
plan = GeneratorPlan(scenario=sc.model_dump(mode="json", by_alias=True), target_url={url!r}, model="m",
                     duration_s=2.5, seed=sc.seed, run_nonce="userstopped", run_dir={run_dir!r})
controller = LocalController(plan)
gevent.sleep(0.8)
controller.runner.stop()  # what Locust does to a worker's users when its master rebalances them
gevent.sleep(max(0.0, plan.duration_s - controller.loop.offset_now()))
print(json.dumps(controller.stop(5.0)["counters"]))
"""


def test_arrivals_outlive_the_locust_user(sse_server, tmp_path: Path) -> None:
    """Locust may stop a generating process's user at any time (a master rebalances users when a worker that
    missed heartbeats on a loaded machine comes back): the open loop's arrivals go on regardless, all issued.
    Before the generator had a greenlet of its own, it died with the user and the rest of its share was never
    sent, silently (tests/llamacpp/test_token_exact.py lost every request of a pool so, once)."""
    code = _USER_STOPPED.format(tests=str(Path(__file__).parent), url=sse_server.url, run_dir=str(tmp_path / "run"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    counters = json.loads(proc.stdout.strip().splitlines()[-1])
    assert counters["scheduled"] > 40 and counters["due"] == counters["scheduled"], counters
