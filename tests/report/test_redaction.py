"""Redaction: credentials never reach a file of the run directory; prompt text reaches a report only on opt-in.

The unit tests pin what :class:`Redactor` treats as a secret. The integration test plants secrets in a real
run (``drill run`` against the reference stack, attached as an ``openai`` target): a literal ``X-Api-Key``
header in the drill file, an ``api_key`` (``Authorization: Bearer``) read from the environment, a ``Cookie``
given with ``--set`` on the command line, an environment variable with a secret-looking name, and the prompts
of the run's own failing requests; then it greps every file the run wrote, reports included.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from drill.rundir.redact import (
    REDACTED,
    Redactor,
    drop_secret_headers,
    is_secret_name,
    scrub_files,
    secret_environment_values,
    secret_values,
)

REPO = Path(__file__).resolve().parents[2]
DRILL = Path(sys.executable).with_name("drill")


# --- what is a secret --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "Authorization",
        "proxy-authorization",
        "Cookie",
        "Set-Cookie",
        "X-Api-Key",
        "api-key",
        "HF_TOKEN",
        "OPENAI_API_KEY",
        "apiKey",
        "client_secret",
        "admin_token",
        "DB_PASSWORD",
        "aws_secret_access_key",
        "X-Auth",
        "GITHUB_OAUTH",
    ],
)
def test_credential_names_are_secret(name):
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "Idempotency-Key",
        "idempotency_key",
        "drill.idempotency_key",
        "same_idempotency_key",
        "input_tokens",
        "max_tokens",
        "TOKENIZERS_PARALLELISM",
        "long_prefill_token_threshold",
        "token_ids",
        "key",
        "min_keys",
        "author",
        "PWD",
        "Content-Type",
        "traceparent",
        "X-Request-Id",
    ],
)
def test_evidence_and_counts_are_not_secret(name):
    assert not is_secret_name(name)


def test_headers_keep_names_and_redact_credentials():
    headers = {
        "Authorization": "Bearer abc.def",
        "X-Api-Key": "k",
        "Cookie": "s=1",
        "Idempotency-Key": "idem-1",
        "Content-Type": "application/json",
        "traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01",
    }
    shown = Redactor().headers(headers)
    assert shown["Authorization"] == shown["X-Api-Key"] == shown["Cookie"] == REDACTED
    assert shown["Idempotency-Key"] == "idem-1" and shown["traceparent"] == headers["traceparent"]
    assert drop_secret_headers(headers) == {k: headers[k] for k in ("Idempotency-Key", "Content-Type", "traceparent")}


@pytest.mark.parametrize(
    ("text", "kept", "gone"),
    [
        ("Authorization: Bearer eyJhbGciOi.payload.sig", "Authorization: ", "eyJhbGciOi"),
        ('{"authorization": "Basic dXNlcjpwYXNz"}', '"authorization": "', "dXNlcjpwYXNz"),
        ("curl -H 'X-Api-Key: live_4f9a8b7c6d' http://x", "X-Api-Key: ", "live_4f9a8b7c6d"),
        ("key sk-proj-AbCdEf0123456789xyz in use", "key ", "sk-proj-AbCdEf0123456789xyz"),
        ("HF_TOKEN=hf_aBcDeFgHiJkLmNoPqRsT python serve.py", "HF_TOKEN=", "hf_aBcDeFgHiJkLmNoPqRsT"),
        ("vllm serve m --api-key s3cr3t-value --port 8000", "--port 8000", "s3cr3t-value"),
        ("fetch https://bob:hunter22@example.com/x", "@example.com/x", "hunter22"),
        ('{"password": "correct horse"}', '"password": "', "correct"),
        ("token ghp_0123456789abcdefghijABCDEFGHIJ012345", "token ", "ghp_0123456789abcdefghij"),
        ("AWS AKIAABCDEFGHIJKLMNOP used", "AWS ", "AKIAABCDEFGHIJKLMNOP"),
    ],
)
def test_free_text_loses_credentials_and_keeps_the_rest(text, kept, gone):
    scrubbed = Redactor().value(text)
    assert gone not in scrubbed and kept in scrubbed and REDACTED in scrubbed, scrubbed


@pytest.mark.parametrize(
    "text",
    [
        "max_tokens=16 input_tokens: 200",
        "Basic recovery checks passed",
        "the token budget was spent",
        "idempotency_key=idem-42 replayed",
        "p95 TTFT 2.4 s > 2 s",
    ],
)
def test_ordinary_text_is_left_alone(text):
    assert Redactor().value(text) == text


def test_known_secret_values_are_scrubbed_wherever_they_appear():
    redactor = Redactor(secrets=["planted-value-123", "abc"])  # too short to scrub as an exact value: "abc"
    assert redactor.value("x=planted-value-123;y") == f"x={REDACTED};y"
    assert redactor.value("abc") == "abc"
    longer = redactor.with_secrets(["planted-value-123-and-more"])
    assert longer.value("planted-value-123-and-more") == REDACTED


def test_prompt_text_is_a_digest_unless_the_drill_opts_in():
    text = "Summarise the incident for the on-call"
    assert Redactor().text(text) == f"sha256:{hashlib.sha256(text.encode()).hexdigest()[:12]} ({len(text)} chars)"
    assert Redactor(include_text=True).text(text) == text
    assert Redactor(include_text=True).text("with Bearer abcdefghijkl") == f"with Bearer {REDACTED}"


def test_env_data_and_secret_values():
    env = {"HF_TOKEN": "hf_x", "VLLM_USE_V1": "1", "HTTP_PROXY": "http://u:p4ssword@proxy:3128"}
    assert Redactor().env(env) == {
        "HF_TOKEN": REDACTED,
        "VLLM_USE_V1": "1",
        "HTTP_PROXY": f"http://{REDACTED}@proxy:3128",
    }
    config = {"url": "http://h", "headers": {"Authorization": "Bearer tok-123456", "X-Trace": "t"}, "api_key": None}
    assert Redactor().data(config) == {
        "url": "http://h",
        "headers": {"Authorization": REDACTED, "X-Trace": "t"},
        "api_key": None,
    }
    assert set(secret_values(config)) == {"Bearer tok-123456", "tok-123456"}
    assert secret_environment_values({"MY_TOKEN": "longenough", "OTHER": "longenough", "SHORT_KEY": "x"}) == [
        "longenough"
    ]


def test_scrub_files_rewrites_in_place_only_what_changed(tmp_path):
    dirty, clean = tmp_path / "a.log", tmp_path / "b.log"
    dirty.write_text("request failed: Authorization: Bearer abcdefghijk\n")
    clean.write_text("all good\n")
    with open(dirty, "a") as appender:  # a process still appending keeps appending to the same file
        assert scrub_files([dirty, clean, tmp_path / "missing.log"], Redactor()) == [dirty]
        appender.write("later line\n")
    assert dirty.read_text() == f"request failed: Authorization: {REDACTED}\nlater line\n"
    assert clean.read_text() == "all good\n"


# --- the openai target's headers ---------------------------------------------------------------------------------


def test_openai_target_headers_read_secrets_from_the_environment(monkeypatch):
    from drill.api import TargetContext
    from drill.errors import TargetError
    from drill.targets.openai import OpenAITarget, OpenAITargetParams

    params = OpenAITargetParams(url="http://127.0.0.1:1", headers={"X-Api-Key": "lit-1"}, api_key="${R2_TEST_KEY}")
    target = OpenAITarget(params, TargetContext("r", "/tmp"))
    monkeypatch.setenv("R2_TEST_KEY", "from-env-42")
    assert target.request_headers() == {"X-Api-Key": "lit-1", "Authorization": "Bearer from-env-42"}
    monkeypatch.delenv("R2_TEST_KEY")
    with pytest.raises(TargetError, match="api_key: the environment variable R2_TEST_KEY is not set"):
        target.request_headers()


# --- a real run with planted secrets -----------------------------------------------------------------------------

LITERAL_API_KEY = "planted-xapikey-7c1e9d"  # in the drill file itself
ENV_BEARER = "planted-bearer-4b2f8a"  # api_key: ${R2_PLANTED_BEARER}
ENV_SECRET = "planted-envsecret-91d3"  # DRILL_PLANTED_SECRET_TOKEN, never referenced by the drill
ARGV_COOKIE = "planted-cookie-5e6f0a"  # --set target.config.headers.Cookie=...
PLANTED = (LITERAL_API_KEY, ENV_BEARER, ENV_SECRET, ARGV_COOKIE)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    from drill.stack.config import parse_stack_config
    from drill.stack.supervision.launcher import start_stack, stop_stack

    state_dir = tmp_path_factory.mktemp("stack")
    config = parse_stack_config({"replicas": 1, "engine": {"weight_load_time": "200ms"}})
    state = start_stack(config, name="r2-redaction", state_dir=state_dir, timeout_s=90)
    yield state
    stop_stack("r2-redaction", state_dir=state_dir)


class WireTap:
    """A TCP relay in front of the stack that keeps the bytes clients send (to see which headers reached the
    wire); the responses pass through untouched. It observes the real target, it does not stand in for it."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.sent = bytearray()
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, keep: bool) -> None:
        try:
            while chunk := src.recv(65536):
                if keep:
                    with self.lock:
                        self.sent += chunk
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for end in (src, dst):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def count(self, needle: str) -> int:
        with self.lock:
            return bytes(self.sent).lower().count(needle.lower().encode())

    def heads(self, request_line_start: str) -> list[str]:
        """The head (request line and headers) of every request whose line starts so, lower-cased."""
        with self.lock:
            data = bytes(self.sent).lower()
        needle, out, at = request_line_start.lower().encode(), [], 0
        while (at := data.find(needle, at)) >= 0:
            end = data.find(b"\r\n\r\n", at)
            out.append(data[at : end if end >= 0 else len(data)].decode("latin-1"))
            at += len(needle)
        return out

    def close(self) -> None:
        self.server.close()


@pytest.fixture(scope="module")
def tap(stack):
    tap = WireTap(stack.router)
    yield tap
    tap.close()


@pytest.fixture(scope="module")
def planted_run(tap, tmp_path_factory) -> Path:
    return _planted_run(tap.url, tmp_path_factory.mktemp("planted"))


def _planted_run(url: str, out: Path) -> Path:
    """A short run whose interactive pool times out often (a 150 ms client timeout), so it has failing
    samples, a recovery replay and prompts shown in the report."""
    drill = {
        "name": "planted",
        "target": {
            "kind": "openai",
            "config": {
                "url": url,
                "api_key": "${R2_PLANTED_BEARER}",
                "headers": {"X-Api-Key": LITERAL_API_KEY},
            },
        },
        "scenario": {
            "seed": 5,
            "arrival": {"process": "poisson", "rate": 6},
            "pools": [
                {
                    "name": "chat",
                    "input_tokens": {"dist": "uniform", "min": 20, "max": 120},
                    "output_tokens": {"dist": "fixed", "value": 48},
                    "timeout": "150ms",
                    "slo": {"ttft_p95": "2s"},
                }
            ],
        },
        "otlp": {"port": 0},
        "phases": {
            "warmup": "0s",
            "baseline": "3s",
            "fault": "2s",
            "recovery": "2s",
            "replay": {"max_samples": 5, "controls": 2},
        },
        "checks": [{"kind": "error_rate", "params": {"phase": "baseline", "max": 1.0}}],
    }
    path = out / "planted.yaml"
    path.write_text(yaml.safe_dump(drill, sort_keys=False))
    env = {**os.environ, "R2_PLANTED_BEARER": ENV_BEARER, "DRILL_PLANTED_SECRET_TOKEN": ENV_SECRET}
    argv = [
        str(DRILL),
        "run",
        str(path),
        "--out",
        str(out / "reports"),
        "--no-progress",
        "--set",
        f"target.config.headers.Cookie={ARGV_COOKIE}",
    ]
    done = subprocess.run(argv, cwd=out, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    runs = [p for p in (out / "reports" / "planted").iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def _every_file(run_dir: Path) -> list[Path]:
    return sorted(p for p in run_dir.rglob("*") if p.is_file())


def _prompts(run_dir: Path) -> list[str]:
    texts = []
    for line in (run_dir / "failing_samples.jsonl").read_text().splitlines():
        body = json.loads(base64.b64decode(json.loads(line)["body_b64"]))
        texts.append(" ".join(m["content"] for m in body["messages"]))
    return texts


@pytest.mark.integration
def test_planted_secrets_reach_no_file_of_the_run(planted_run, tap):
    run_dir = planted_run
    # They were sent: every load and replay request on the wire carried the target's three credentials ...
    posts = tap.heads("POST /v1/")
    assert len(posts) > 10
    for header in (f"authorization: bearer {ENV_BEARER}", f"x-api-key: {LITERAL_API_KEY}", f"cookie: {ARGV_COOKIE}"):
        missing = [head.splitlines()[0] for head in posts if f"\r\n{header.lower()}" not in head]
        assert missing == [], (header, len(missing), len(posts))
    assert tap.count(ENV_SECRET) == 0  # not a header: never sent
    # ... and reached no file.
    files = _every_file(run_dir)
    names = {p.relative_to(run_dir).as_posix() for p in files}
    for expected in (
        "env.json",
        "resolved.json",
        "drill.yaml",
        "journal.jsonl",
        "requests.jsonl",
        "failing_samples.jsonl",
        "replay.jsonl",
        "verdicts.json",
        "junit.xml",
        "load-driver.log",
        "watchdog.log",
    ):
        assert expected in names, (expected, sorted(names))
    leaks = [(p.relative_to(run_dir).as_posix(), s) for p in files for s in PLANTED if s.encode() in p.read_bytes()]
    assert leaks == [], leaks

    env = json.loads((run_dir / "env.json").read_text())
    assert env["environment"]["DRILL_PLANTED_SECRET_TOKEN"] == REDACTED  # recorded by name, value redacted
    resolved = json.loads((run_dir / "resolved.json").read_text())
    assert resolved["target_params"]["headers"] == {"X-Api-Key": REDACTED, "Cookie": REDACTED}
    assert resolved["target_params"]["api_key"] == REDACTED

    samples = [json.loads(line) for line in (run_dir / "failing_samples.jsonl").read_text().splitlines()]
    assert samples, "the 150 ms timeout left no failing samples: nothing was replayed"
    for sample in samples:
        sent = {k.lower() for k in sample["headers"]}
        assert "idempotency-key" in sent and "x-request-id" in sent, sample["headers"]
        assert not sent & {"authorization", "x-api-key", "cookie"}, sample["headers"]


@pytest.mark.integration
def test_reports_show_prompt_digests_unless_the_drill_opts_in(planted_run, tmp_path):
    run_dir = planted_run
    reports = [run_dir / "report.md", run_dir / "report.html"]
    if not all(p.exists() for p in reports):
        pytest.fail(f"the run wrote no report.md/report.html: {sorted(p.name for p in run_dir.iterdir())}")
    markers = [text[:40] for text in _prompts(run_dir) if len(text) >= 40]
    assert markers
    for report in reports:
        body = report.read_text()
        assert not [m for m in markers if m in body], report.name
        assert "sha256:" in body, report.name

    # The same run with report.include_text: the prompts appear, so the search above can find them.
    opted = tmp_path / "opted"
    shutil.copytree(run_dir, opted, ignore=shutil.ignore_patterns("report.*"))
    resolved = json.loads((opted / "resolved.json").read_text())
    resolved["drill"]["report"]["include_text"] = True
    (opted / "resolved.json").write_text(json.dumps(resolved))
    from drill.report.render import write_reports

    write_reports(opted)
    body = (opted / "report.md").read_text()
    assert any(m in body for m in markers), "include_text: true did not show the prompts"
    assert not [s for s in PLANTED for p in _every_file(opted) if s.encode() in p.read_bytes()]
