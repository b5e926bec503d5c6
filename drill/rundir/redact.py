"""Redaction: secrets never reach a report, a log or ``env.json``; prompt text only when the drill opts in.

:class:`Redactor` is the one place that decides what is a secret:

- a **header**, **environment variable** or **config key** whose name is a known credential
  (``Authorization``, ``Proxy-Authorization``, ``Cookie``, ``Set-Cookie``, ``X-Api-Key``, ``api-key``), has a
  word ``secret``, ``password``, ``credential``, ``apikey``, ``cookie``, ..., or ends in ``token``, ``key``,
  ``auth`` (``HF_TOKEN``, ``OPENAI_API_KEY``, ``client_secret``; case-insensitive) has its value replaced by
  ``[redacted]``. Whole words, so ``input_tokens``, ``token_ids`` and ``TOKENIZERS_PARALLELISM`` are kept, and
  ``Idempotency-Key`` is evidence and is kept;
- **free text** (a log line, an error message, a command line) has bearer and basic credentials, API-key
  shapes (``sk-…``, ``hf_…``, GitHub and Slack tokens, AWS access key ids, JWTs), ``name=value`` pairs whose
  name looks secret, credentials in URLs, and every exact secret value the redactor was told about
  (``secrets=``: the target's header values, secret environment values) scrubbed;
- **prompt and completion text** becomes ``sha256:<12 hex> (N chars)`` unless ``include_text`` (the drill's
  ``report: {include_text: true}``).

Raw evidence that a replay needs byte for byte (request bodies in ``failing_samples.jsonl``) is not passed
through here; the secret *headers* of a stored sample are dropped when it is written (see
:func:`drop_secret_headers`) and the replay adds the target's headers again from its configuration.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "CONTROL_CHARACTERS",
    "REDACTED",
    "Redactor",
    "drop_secret_headers",
    "escape_controls",
    "is_secret_name",
    "run_redactor",
    "scrub_files",
    "scrub_logs",
    "scrub_url_userinfo",
    "secret_environment_values",
    "secret_values",
]

REDACTED = "[redacted]"

#: Header names that are credentials whatever they contain (compared lower-case).
_CREDENTIAL_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key"}
)
#: A name is secret when one of its words (split at ``_ - . :`` and spaces) is in ``_SECRET_ANYWHERE``, or its
#: last word is in ``_SECRET_LAST`` or ends like one (``hftoken``, ``clientsecret``): ``HF_TOKEN``, ``api_key``,
#: ``admin_token``, ``client_secret`` are secret; ``input_tokens``, ``token_ids``, ``long_prefill_token_threshold``
#: and ``TOKENIZERS_PARALLELISM`` are not. Whole words, not substrings.
_SECRET_ANYWHERE = frozenset(
    {"secret", "password", "passwd", "credential", "credentials", "authorization", "apikey", "bearer", "cookie"}
)
_SECRET_LAST = frozenset({"token", "key", "auth", "oauth"})  # not "pwd": $PWD is the working directory
_SECRET_ENDINGS = ("token", "secret", "apikey", "password", "passwd")
#: Names that contain a secret word but carry evidence, not credentials (and a bare ``key``: a dict's field).
_NOT_SECRET = frozenset({"key", "idempotency-key", "x-idempotency-key", "idempotency_key", "drill.idempotency_key"})
_EVIDENCE_WORDS = frozenset({"idempotency"})
#: A known secret shorter than this is not scrubbed from free text as an exact value (too many false hits).
_MIN_EXACT = 6

#: The userinfo of a URL (``user:password@``, a token used as the user name): a credential wherever it is shown.
_URL_USERINFO = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://)(?!\[redacted\]@)[^/\s@\[\]]+@")

# In free text, a name=value pair is secret when the name *ends* in a secret word (HF_TOKEN=..., "api_key": ..).
_SECRET_NAME = r"\b[A-Za-z0-9_.-]*(?:token|secret|api[_-]?key|password|passwd|credentials?)"
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # "Authorization: Bearer x", "authorization=Basic x", '"X-Api-Key": "x"' -> keep the name only.
    (
        re.compile(
            r"(?i)\b((?:proxy-)?authorization|x-api-key|api-key|set-cookie|cookie)(\"?'?\s*[:=]\s*\"?'?)"
            r"(?!\[redacted\])[^\"'\r\n,}]+"
        ),
        rf"\1\2{REDACTED}",
    ),
    (re.compile(r"(?i)\b(bearer)(\s+)(?!\[redacted\])[A-Za-z0-9._~+/=-]{6,}"), rf"\1\2{REDACTED}"),
    (re.compile(r"\b(Basic)(\s+)(?=[A-Za-z+/]*[0-9+/=])[A-Za-z0-9+/]{8,}={0,2}"), rf"\1\2{REDACTED}"),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{8,}"), REDACTED),
    (re.compile(r"\bhf_[A-Za-z0-9]{8,}"), REDACTED),
    (re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"), REDACTED),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), REDACTED),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), REDACTED),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), REDACTED),
    # HF_TOKEN=x, "api_key": "x", password: x
    (
        re.compile(rf"(?i)({_SECRET_NAME}[\"']?)(\s*[:=]\s*)([\"']?)(?!\[redacted\])[^\s\"',;&}}]+"),
        rf"\1\2\3{REDACTED}",
    ),
    # --api-key x, --hf-token x (command lines)
    (re.compile(r"(?i)(--[a-z0-9-]*(?:token|secret|key|password))(\s+)(?!\[redacted\])(?!-)\S+"), rf"\1\2{REDACTED}"),
    # scheme://user:password@host, scheme://token@host: the whole userinfo
    (_URL_USERINFO, rf"\1{REDACTED}@"),
)

_SCHEMES = frozenset({"bearer", "basic", "token", "digest"})
_WORD_SPLIT = re.compile(r"[\s_.:/-]+")


#: Characters never written raw into text meant for a person (a terminal, report.md/.html): the C0 controls but tab
#: and newline, DEL, the C1 controls (ESC starts colour, cursor and OSC sequences), the bidi embeddings, overrides,
#: isolates and marks (they reorder the text shown).
CONTROL_CHARACTERS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def escape_controls(text: str) -> str:
    """``text`` with each of :data:`CONTROL_CHARACTERS` shown as its escape (``\\x1b``, ``\\u202e``)."""
    return CONTROL_CHARACTERS.sub(_control_escape, text)


def _control_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def scrub_url_userinfo(text: str) -> str:
    """``text`` with the userinfo of every URL in it replaced (``http://[redacted]@host``): what every line printed
    to a terminal gets, as it may quote a target's URL."""
    return _URL_USERINFO.sub(rf"\1{REDACTED}@", text) if "@" in text else text


def is_secret_name(name: str) -> bool:
    """True for a header, environment variable or config key whose value is a credential."""
    lowered = name.strip().lower()
    if lowered in _NOT_SECRET:
        return False
    if lowered in _CREDENTIAL_HEADERS:
        return True
    words = [w for w in _WORD_SPLIT.split(lowered) if w]
    if not words or _EVIDENCE_WORDS.intersection(words):
        return False
    return (
        bool(_SECRET_ANYWHERE.intersection(words)) or words[-1] in _SECRET_LAST or words[-1].endswith(_SECRET_ENDINGS)
    )


def drop_secret_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers without the credentials: what a stored request sample keeps (its body is untouched)."""
    return {name: value for name, value in headers.items() if not is_secret_name(name)}


def secret_environment_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of the environment variables whose names look secret (to scrub them from free text)."""
    environ = os.environ if environ is None else environ
    return [value for name, value in environ.items() if is_secret_name(name) and len(value) >= _MIN_EXACT]


def secret_values(data: Any) -> list[str]:
    """Every string held under a secret-looking key anywhere in JSON-like ``data`` (a target's config)."""
    found: list[str] = []
    if isinstance(data, Mapping):
        for key, value in data.items():
            if isinstance(key, str) and is_secret_name(key) and isinstance(value, str):
                found.append(value)
                # "Bearer <token>": the token alone too, not the scheme's name
                found += [part for part in value.split() if len(part) >= _MIN_EXACT and part.lower() not in _SCHEMES]
            else:
                found += secret_values(value)
    elif isinstance(data, (list, tuple)):
        for item in data:
            found += secret_values(item)
    return found


def run_redactor(config: Any, include_text: bool = False) -> Redactor:
    """A run's redactor (``drill run``, ``drill capacity``): it scrubs the secret values of the environment and of
    the run's JSON-like ``config`` (the target's, the metrics source's) from every file the run writes; add the
    request headers with :meth:`Redactor.with_secrets` once their ``${NAME}`` are expanded."""
    return Redactor(include_text, [*secret_environment_values(), *secret_values(config)])


class Redactor:
    """Scrubs secrets from headers, environments, free text and JSON-like data; digests prompt text."""

    def __init__(self, include_text: bool = False, secrets: Iterable[str] = ()) -> None:
        self.include_text = include_text
        # Longest first, so a secret that contains another is replaced whole.
        self._exact = sorted({s for s in secrets if isinstance(s, str) and len(s) >= _MIN_EXACT}, key=len, reverse=True)

    def with_secrets(self, secrets: Iterable[str]) -> Redactor:
        """A redactor that also scrubs these exact values."""
        return Redactor(self.include_text, (*self._exact, *secrets))

    def text(self, s: str) -> str:
        """Prompt or completion text: itself (scrubbed) when the drill opts in, else its digest."""
        if self.include_text:
            return self.value(s)
        digest = hashlib.sha256(s.encode("utf-8")).hexdigest()[:12]
        return f"sha256:{digest} ({len(s)} chars)"

    def value(self, s: str) -> str:
        """Free text with credentials scrubbed."""
        for secret in self._exact:
            s = s.replace(secret, REDACTED)
        for pattern, replacement in _PATTERNS:
            s = pattern.sub(replacement, s)
        return s

    def headers(self, d: Mapping[str, str]) -> dict[str, str]:
        """Headers with every credential's value replaced by ``[redacted]``; the names are kept."""
        return {name: REDACTED if is_secret_name(name) else self.value(str(value)) for name, value in d.items()}

    def env(self, d: Mapping[str, str]) -> dict[str, str]:
        """Environment variables: a secret-looking name's value is ``[redacted]``, the others are scrubbed."""
        return {name: REDACTED if is_secret_name(name) else self.value(str(value)) for name, value in d.items()}

    def data(self, obj: Any) -> Any:
        """JSON-like data (dicts, lists, strings): secret keys' values redacted, every string scrubbed."""
        if isinstance(obj, Mapping):
            return {
                key: (
                    REDACTED
                    if isinstance(key, str) and is_secret_name(key) and obj[key] not in (None, "")
                    else self.data(obj[key])
                )
                for key in obj
            }
        if isinstance(obj, (list, tuple)):
            return [self.data(item) for item in obj]
        if isinstance(obj, str):
            return self.value(obj)
        return obj


def scrub_files(paths: Iterable[Path], redactor: Redactor) -> list[Path]:
    """Scrub each text file in place (logs written by other processes); returns the files that changed.

    Rewritten in place, not replaced, so a process still appending to one keeps appending to the same file.
    """
    changed = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        scrubbed = redactor.value(text)
        if scrubbed != text:
            with open(path, "r+", encoding="utf-8") as fh:
                fh.write(scrubbed)
                fh.truncate()
            changed.append(path)
    return changed


def scrub_logs(run_dir: Path, redactor: Redactor) -> list[Path]:
    """Scrub every ``*.log`` under a run directory (what other processes logged), when the run ends."""
    return scrub_files(sorted(run_dir.rglob("*.log")), redactor)
