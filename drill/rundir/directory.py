"""The run directory: every raw input and output of one run, never overwritten.

``reports/<drill>/<UTC timestamp>-<short id>/`` holds ``drill.yaml`` (as given),
``resolved.json`` (the validated drill, scenario and plugin params after
``--set`` and ``--time-scale``), ``env.json``, ``journal.jsonl``, and what the
parts of a run write as it goes: ``requests.jsonl``, ``failing_samples.jsonl``,
``spans.jsonl``, ``metrics.jsonl``, ``replay.jsonl``, ``verdicts.json``,
reports. Files are appended and flushed as the run goes; a new run always gets
a new directory (creation fails rather than reuse one).
"""

from __future__ import annotations

import json
import os
import platform
import secrets
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from drill import __version__
from drill.rundir.journal import Event, Journal, process_start_time
from drill.rundir.redact import Redactor, is_secret_name

__all__ = [
    "RunDir",
    "create_run_dir",
    "environment",
    "latest_run_dir",
    "open_run",
    "package_versions",
    "recorded_environment",
]

_PACKAGES = (
    "locust",
    "gevent",
    "geventhttpclient",
    "httpx",
    "docker",
    "opentelemetry-sdk",
    "opentelemetry-proto",
    "prometheus-client",
    "pydantic",
    "pyyaml",
    "jinja2",
    "click",
    "rich",
)


@dataclass(frozen=True)
class RunDir:
    path: Path
    run_id: str

    def file(self, name: str) -> Path:
        return self.path / name

    @property
    def journal(self) -> Path:
        return self.path / "journal.jsonl"

    def write_json(self, name: str, data: object) -> Path:
        """Write a whole JSON file once (refuses to overwrite)."""
        target = self.path / name
        with open(target, "x", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=False, default=str)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        return target

    def write_text(self, name: str, text: str) -> Path:
        target = self.path / name
        with open(target, "x", encoding="utf-8") as fh:
            fh.write(text)
        return target


def create_run_dir(base: Path, drill_name: str, *, now: float | None = None) -> RunDir:
    """A fresh ``<base>/<drill>/<UTC timestamp>-<id>/``; never an existing one."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now if now is not None else time.time()))
    for _ in range(20):
        run_id = f"{stamp}-{secrets.token_hex(3)}"
        path = base / drill_name / run_id
        try:
            path.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            continue
        return RunDir(path, run_id)
    raise RuntimeError(f"could not create a new run directory under {base / drill_name}")


def latest_run_dir(base: Path) -> Path | None:
    """The newest ``<base>/<drill>/<id>/`` that has a journal (run ids sort by their UTC timestamp), else None."""
    found = sorted(p.parent for p in base.glob("*/*/journal.jsonl"))
    return found[-1] if found else None


def open_run(
    base: Path,
    name: str,
    argv: Sequence[str],
    *,
    time_scale: float | None = None,
    kind: str | None = None,
    hold_s: float | None = None,
    target: dict[str, Any] | None = None,
) -> tuple[RunDir, Journal]:
    """The one way a run starts (``drill run``, a sweep, ``drill capacity``, ``drill fault inject``): a fresh
    ``<base>/<name>/<id>/``, its journal, and the journal's first line, RUN_STARTED, naming this process.

    ``argv`` goes into the journal as given: the caller scrubs it first (a redactor's ``value``). The optional
    fields are written only when given (``kind``, ``hold_s``, ``target``: a fault held by hand).
    """
    rundir = create_run_dir(base, name)
    journal = Journal(rundir.journal)
    given = {"time_scale": time_scale, "kind": kind, "hold_s": hold_s, "target": target}
    journal.write(
        Event.RUN_STARTED,
        run_id=rundir.run_id,
        drill=name,
        pid=os.getpid(),
        pid_start=process_start_time(os.getpid()),
        argv=list(argv),
        **{key: value for key, value in given.items() if value is not None},
    )
    return rundir, journal


def package_versions() -> dict[str, str]:
    found = {}
    for name in _PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


#: Environment variables worth recording in ``env.json`` (what changes a serving stack's or the harness's
#: behaviour); any variable whose name looks secret is recorded too, with its value redacted.
_ENV_PREFIXES = (
    "VLLM_",
    "SGLANG_",
    "CUDA_",
    "NCCL_",
    "NVIDIA_",
    "OTEL_",
    "HF_",
    "HUGGING",
    "OPENAI_",
    "DRILL_",
    "TOXIPROXY_",
    "JAEGER_",
    "TORCH",
    "PYTORCH_",
    "OMP_",
    "TOKENIZERS_",
)


def recorded_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment variables ``env.json`` records (not yet redacted), sorted by name."""
    environ = dict(os.environ) if environ is None else environ
    return {k: v for k, v in sorted(environ.items()) if k.startswith(_ENV_PREFIXES) or is_secret_name(k)}


def environment(
    run_id: str, argv: list[str], seeds: dict[str, int], extra: dict | None = None, *, redactor: Redactor | None = None
) -> dict:
    """Facts for ``env.json``: versions, interpreter, host, seeds, command line, relevant environment variables.

    Everything passes through ``redactor`` (a fresh :class:`~drill.rundir.redact.Redactor` if none): a secret
    environment variable is recorded by name with its value ``[redacted]``, and credentials in the command
    line or in ``extra`` are scrubbed.
    """
    redactor = redactor or Redactor()
    facts = {
        "run_id": run_id,
        "llm_drill": __version__,
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "argv": argv,
        "seeds": seeds,
        "packages": package_versions(),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **(extra or {}),
    }
    facts = redactor.data(facts)
    facts["environment"] = redactor.env(recorded_environment())
    return facts
