"""The one exception tree of llm-drill.

Every error the harness raises on purpose is a :class:`DrillError`. Foreign
exceptions (httpx, docker, OS errors) are translated at the boundary where they
happen, chained with ``raise ... from exc``, into the most specific class here.
The CLI maps the class to an exit code (:attr:`DrillError.exit_code`)::

    DrillError                      exit 3 unless a subclass says otherwise
    ├── InputError                  exit 2: bad input; nothing was touched
    │   ├── SpecError               drill/scenario/stack file invalid (carries Diagnostics)
    │   ├── UnsafeTargetError       host outside loopback and not allowed
    │   └── UnknownPluginError      no plugin of that kind is installed
    ├── PluginError                 a plugin is broken (bad entry point, bad Params)
    ├── NotAvailableError           a part the drill needs is not built/installed
    ├── TargetError                 the target could not be started, reached or stopped
    │   └── StackError              the embedded reference stack failed
    ├── BackendError                a fault mechanism call failed (with .backend)
    │   ├── HttpApiError            a REST API call failed (with .status; drill/backends/rest.py)
    │   │   ├── ToxiproxyError
    │   │   └── AdminApiError       the reference stack's admin API
    │   ├── DockerError
    │   ├── ProcessControlError
    │   ├── GpuError                nvidia-smi, NVML, the CUDA memory hog
    │   ├── NetemError              tc/netem on a host interface
    │   └── KubernetesError         the Kubernetes API (with .status; drill/backends/kubernetes.py)
    │       └── KubernetesAccessError  exit 2: the pre-flight found a verb on a resource not allowed
    ├── FaultError                  a fault could not be handled (with .fault)
    │   ├── InjectError
    │   ├── FaultNotLanded          verify() found no proof the fault took effect
    │   └── RevertError             exit 4: the target may still be faulted
    ├── LoadError                   the load driver failed
    └── RunInterrupted              exit 130: SIGINT/SIGTERM; reverts were attempted

Messages say what happened, with the offending value and units, and what to do
next. Exceptions carry structured fields so programs need not parse text.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = [
    "AdminApiError",
    "BackendError",
    "DockerError",
    "DrillError",
    "FaultError",
    "FaultNotLanded",
    "GpuError",
    "HttpApiError",
    "InjectError",
    "InputError",
    "KubernetesAccessError",
    "KubernetesError",
    "LoadError",
    "NetemError",
    "NotAvailableError",
    "PluginError",
    "ProcessControlError",
    "RevertError",
    "RunInterrupted",
    "SpecError",
    "StackError",
    "TargetError",
    "ToxiproxyError",
    "UnknownPluginError",
    "UnsafeTargetError",
    "did_you_mean",
]


class DrillError(Exception):
    """Base class of every error llm-drill raises on purpose."""

    exit_code: int = 3

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}\n  hint: {self.hint}"
        return self.message


class InputError(DrillError, ValueError):
    """The user's input is invalid. Nothing was started or changed."""

    exit_code = 2


class SpecError(InputError):
    """One or more problems in input files, all collected in one pass.

    ``diagnostics`` holds :class:`drill.spec.diagnostics.Diagnostic` items, each
    located at ``file:line:col`` with a key path.
    """

    def __init__(self, diagnostics: list, message: str | None = None) -> None:
        self.diagnostics = list(diagnostics)
        count = len(self.diagnostics)
        text = message or f"{count} error{'s' if count != 1 else ''}; nothing was run."
        super().__init__(text)

    def render(self) -> str:
        lines = [d.render() for d in self.diagnostics]
        lines.append(self.message)
        return "\n".join(lines)


class UnsafeTargetError(InputError):
    """A drill would touch a host outside loopback that was not allowed."""

    def __init__(self, host: str, where: str) -> None:
        super().__init__(
            f"refusing to touch host {host!r} ({where}): only loopback is allowed by default",
            hint=f"list it under 'allowed_hosts:' in the drill, or pass --allow-host {host}",
        )
        self.host = host
        self.where = where


class UnknownPluginError(InputError):
    """No plugin with that kind is installed in the group."""

    def __init__(self, group: str, kind: str, known: list[str], suggestion: str | None) -> None:
        listing = f"`drill {group}s list` shows" if group == "fault" else "installed:"
        tail = f"{listing} {'every installed kind' if group == 'fault' else ', '.join(sorted(known)) or '(none)'}"
        hint = f"did you mean {suggestion!r}? ({tail})" if suggestion else tail
        super().__init__(f"unknown {group} kind {kind!r}", hint=hint)
        self.group = group
        self.kind = kind
        self.known = known


class PluginError(DrillError):
    """A plugin found through an entry point is broken."""


class NotAvailableError(DrillError):
    """A part that the drill needs is not built or not installed yet."""

    exit_code = 2


class TargetError(DrillError):
    """The target could not be started, reached or stopped."""


class StackError(TargetError):
    """The embedded reference serving stack failed."""


class BackendError(DrillError):
    """A fault mechanism (Toxiproxy, Docker, signals, admin API) call failed."""

    backend = "backend"

    def __init__(self, message: str, *, hint: str | None = None, operation: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.operation = operation


class HttpApiError(BackendError):
    """A call to a backend's REST API failed: ``status`` is the HTTP status it answered, None when none came."""

    backend = "http"

    def __init__(
        self, message: str, *, hint: str | None = None, operation: str | None = None, status: int | None = None
    ) -> None:
        super().__init__(message, hint=hint, operation=operation)
        self.status = status


class ToxiproxyError(HttpApiError):
    backend = "toxiproxy"


class DockerError(BackendError):
    backend = "docker"


class ProcessControlError(BackendError):
    backend = "process"


class GpuError(BackendError):
    backend = "gpu"


class NetemError(BackendError):
    backend = "netem"


class AdminApiError(HttpApiError):
    backend = "stack-admin"


class KubernetesError(BackendError):
    """A call to the Kubernetes API failed: ``status`` is the HTTP status it answered, None when none came."""

    backend = "kubernetes"

    def __init__(
        self, message: str, *, hint: str | None = None, operation: str | None = None, status: int | None = None
    ) -> None:
        super().__init__(message, hint=hint, operation=operation)
        self.status = status


class KubernetesAccessError(KubernetesError):
    """The pre-flight found that the credentials may not do what the drill needs; nothing was touched."""

    exit_code = 2


class FaultError(DrillError):
    """A fault could not be injected, verified or reverted."""

    def __init__(self, message: str, *, fault: str | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.fault = fault


class InjectError(FaultError):
    """Injecting a fault failed; its revert still runs."""


class FaultNotLanded(FaultError):
    """``verify`` found no proof that the fault took effect.

    A drill whose fault did not land reports it as not landed, never as a pass.
    """


class RevertError(FaultError):
    """A revert failed: the target may still be faulted."""

    exit_code = 4


class LoadError(DrillError):
    """The load driver failed to start or crashed."""


class RunInterrupted(DrillError):
    """The run was interrupted by SIGINT or SIGTERM; reverts were attempted."""

    exit_code = 130

    def __init__(self, signal_name: str) -> None:
        super().__init__(f"interrupted by {signal_name}; reverts attempted (see journal.jsonl)")
        self.signal_name = signal_name


def did_you_mean(word: object, choices: Iterable[str]) -> str | None:
    """The closest of ``choices`` to ``word``, if one is close enough to be a typo."""
    if not isinstance(word, str):
        return None
    options = list(choices)
    lowered = {c.lower(): c for c in options}
    if word.lower() in lowered:
        return lowered[word.lower()]
    match = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return match[0] if match else None
