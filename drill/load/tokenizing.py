"""Token-exact prompts: fit every planned prompt to the target's own tokenizer, at plan time.

Called by the load driver (:mod:`drill.load.driver`) in the harness process once the
schedule is known, before the load child starts; the child reads the result from the run
directory (:data:`FITTED_PROMPTS_FILE`) and builds each body with its
:class:`~drill.load.payload.PromptShape`. The embedded stack keeps its own rule (one token
per word, :mod:`drill.load.payload`); a real tokenizer counts English prose at roughly 1.3
tokens per word, so the request set would not be the declared length distribution.

Where the counts come from (a scenario's ``tokenizer:``, ``drill load --tokenizer``):

- ``server`` (the default for an external target): the server's own tokenize endpoint —
  llama.cpp ``POST /tokenize {"content"}``, vLLM and SGLang ``POST /tokenize {"model",
  "prompt"}``, TGI ``POST /tokenize {"inputs"}`` (``docs/tokenize-endpoints.md``). A target
  without one falls back to ``words`` with a warning in the summary, never silently.
- ``file:<path>``: a local ``tokenizer.json`` read with the ``tokenizers`` library (nothing
  is downloaded).
- ``words``: no fitting (the embedded stack's default).

The chat template's own tokens (and a BOS) are not in any tokenize call of the content:
they are measured once per pool from ``usage.prompt_tokens`` of one real request
(``max_tokens: 1``) whose content was counted. Per pool, with the pool's own system prompt
(the same words in every request of the pool), because a template joins the content to its
headers: a SentencePiece tokenizer adds its word prefix (``▁``) to a text tokenized alone but
not to content that follows a header's newline, so the system prompt's tokens in the
conversation differ from its count alone by an amount that depends on its first word. (The
unique part's boundaries are not measured per request: a tokenizer that merges across them
can leave a prompt a token or two off, which the fit cannot see.)

The algorithm, per planned request: the target count of the counted text is the planned
input length minus the template overhead (and, for chat, the system prompt's count); a
first guess of the word count from per-word token costs measured once; then verify with
the real tokenizer and adjust (words at the end, and a filler word the tokenizer counts as
one token for the last few) until exact, at most :data:`MAX_ROUNDS` rounds. A prompt that
cannot be made exact keeps its closest make-up and is reported (``unfit``), never silently
wrong. Rounds count many prompts at once: in threads over one keep-alive client for a
server, in one batch for a local file.

The same seed and the same tokenizer give the same fit, so a byte-identical request set;
the file is keyed by a tokenizer fingerprint (the token ids of a probe text, the measured
overheads) and the plan, and reused when the key matches, refitted when it does not.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

import httpx

from drill.errors import InputError, LoadError
from drill.load.payload import (
    PromptShape,
    PromptText,
    build_body,
    completion_prompt,
    corpus_vocabulary,
    endpoint_path,
    prompt_parts,
)
from drill.rundir.files import UnsafeFileError, loads_json, read_bytes
from drill.spec.scenario import Endpoint, Pool, Scenario

__all__ = [
    "FITTED_PROMPTS_FILE",
    "MAX_ROUNDS",
    "FileTokenizer",
    "PromptFit",
    "PromptPlan",
    "ServerTokenizer",
    "TokenCounter",
    "TokenizerChoice",
    "UnfitPrompt",
    "measure_overheads",
    "plan_prompts",
    "read_fit",
    "shapes_from_text",
]

log = logging.getLogger(__name__)

FITTED_PROMPTS_FILE = "fitted-prompts.json"
FORMAT = "llm-drill/fitted-prompts/v1"
#: Verify-and-adjust rounds before a prompt that is still off is reported unfit.
MAX_ROUNDS = 6
_THREADS = 8
_PROBE_TEXT = "The quick brown fox jumps over the lazy dog; 0123456789 tokens, prompts and caches."
_FILLER_CANDIDATES = ("a", "I", "x", "o", "s", "the", "and", "of", "to", "in")
_OVERHEAD_PROBE_WORDS = 24
_PROBE_ID = "probe-0"


@dataclass(frozen=True)
class TokenizerChoice:
    """``server``, ``words`` or ``file:<path>`` (a scenario's ``tokenizer:``, ``--tokenizer``)."""

    kind: Literal["server", "file", "words"]
    path: Path | None = None

    @classmethod
    def parse(cls, value: str) -> TokenizerChoice:
        """Raises InputError for anything else."""
        if value in ("server", "words"):
            return cls(value)  # type: ignore[arg-type]
        if value.startswith("file:") and value[5:].strip():
            return cls("file", Path(value[5:].strip()).expanduser())
        raise InputError(
            f"tokenizer must be 'server', 'words' or 'file:<path to tokenizer.json>', got {value!r}",
            hint="'server' asks the target's tokenize endpoint; 'words' keeps one token per word",
        )

    def __str__(self) -> str:
        return f"file:{self.path}" if self.kind == "file" else self.kind


class TokenCounter(Protocol):
    """A tokenizer the fitting asks: the token ids of many texts at once (no special tokens added)."""

    #: Where the counts come from, for the summary (e.g. ``llama.cpp POST /tokenize at http://...``).
    source: str

    def ids(self, texts: Sequence[str]) -> list[list[int]]: ...


# --- tokenizers -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Dialect:
    """One server family's tokenize request and response."""

    name: str
    body: Callable[[str, str], dict[str, object]]
    parse: Callable[[Any], list[int] | None]


def _int_list(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return list(value)
    return None


def _tokens_field(data: Any) -> list[int] | None:
    return _int_list(data.get("tokens")) if isinstance(data, dict) else None


def _tgi_tokens(data: Any) -> list[int] | None:
    if isinstance(data, list) and all(isinstance(t, dict) and isinstance(t.get("id"), int) for t in data):
        return [int(t["id"]) for t in data]
    return None


#: Probed in this order: llama.cpp answers a body without ``content`` with no tokens (so it goes first),
#: vLLM/SGLang refuse a body without ``prompt``, TGI one without ``inputs``.
DIALECTS = (
    _Dialect("llama.cpp", lambda text, model: {"content": text, "add_special": False}, _tokens_field),
    _Dialect(
        "vLLM/SGLang",
        lambda text, model: {"model": model, "prompt": text, "add_special_tokens": False},
        _tokens_field,
    ),
    _Dialect("TGI", lambda text, model: {"inputs": text}, _tgi_tokens),
)


class ServerTokenizer:
    """The target's own ``POST /tokenize``, in threads over one keep-alive client."""

    def __init__(self, client: httpx.Client, model: str, dialect: _Dialect) -> None:
        self.client, self.model, self.dialect = client, model, dialect
        self.source = f"{dialect.name} POST /tokenize at {client.base_url}"

    @classmethod
    def probe(cls, client: httpx.Client, model: str) -> tuple[ServerTokenizer | None, str]:
        """The tokenizer of the first dialect the server answers, or None and why none did."""
        why = []
        for dialect in DIALECTS:
            try:
                response = client.post("/tokenize", json=dialect.body(_PROBE_TEXT, model))
            except httpx.HTTPError as exc:
                return None, f"POST /tokenize failed: {type(exc).__name__}: {exc}"
            ids = dialect.parse(_json(response)) if response.status_code == 200 else None
            if ids:
                return cls(client, model, dialect), ""
            why.append(f"{dialect.name} shape: HTTP {response.status_code}")
        return None, "the target has no tokenize endpoint this harness knows (" + "; ".join(why) + ")"

    def ids(self, texts: Sequence[str]) -> list[list[int]]:
        if len(texts) <= 1:
            return [self._one(t) for t in texts]
        with ThreadPoolExecutor(max_workers=min(_THREADS, len(texts))) as pool:
            return list(pool.map(self._one, texts))

    def _one(self, text: str) -> list[int]:
        try:
            response = self.client.post("/tokenize", json=self.dialect.body(text, self.model))
        except httpx.HTTPError as exc:
            raise LoadError(f"{self.source}: {type(exc).__name__}: {exc}") from exc
        ids = self.dialect.parse(_json(response)) if response.status_code == 200 else None
        if ids is None:
            raise LoadError(f"{self.source} answered HTTP {response.status_code}: {response.text[:200]}")
        return ids


class FileTokenizer:
    """A local ``tokenizer.json`` through the ``tokenizers`` library (nothing is downloaded)."""

    def __init__(self, path: Path) -> None:
        try:
            # lazy: the optional `tokenizers` extra, needed only for a local tokenizer.json
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise InputError(
                f"tokenizer file:{path} needs the 'tokenizers' package",
                hint="pip install 'llm-drill[tokenizers]'",
            ) from exc
        if not path.is_file():
            raise InputError(f"tokenizer file {path} does not exist", hint="give the path of a tokenizer.json")
        try:
            self._tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # noqa: BLE001 - the library raises its own types for a bad file
            raise InputError(f"tokenizer file {path} could not be read: {exc}") from exc
        self.source = f"tokenizer.json at {path}"

    def ids(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self._tokenizer.encode_batch(list(texts), add_special_tokens=False)]


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


# --- the fit --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UnfitPrompt:
    """A prompt the fitting could not make exact: planned and the closest it got (whole context)."""

    logical_id: str
    planned: int
    achieved: int


@dataclass(frozen=True)
class PromptFit:
    """What the fitting decided: the shapes per logical id, or the words rule and why."""

    mode: Literal["server", "file", "words"]
    source: str
    fingerprint: str | None = None
    filler: str = ""
    overheads: dict[str, int] = field(default_factory=dict)
    shapes: dict[str, PromptShape] = field(default_factory=dict)
    unfit: tuple[UnfitPrompt, ...] = ()
    warning: str | None = None
    fit_s: float = 0.0
    reused: bool = False
    key: str = ""

    @property
    def fitted(self) -> bool:
        return self.mode != "words"

    def describe(self) -> str:
        """One line for the summary."""
        if not self.fitted:
            return f"prompts: one token per word ({self.source})" + (
                f" — WARNING: {self.warning}" if self.warning else ""
            )
        how = "reused" if self.reused else f"fitted in {self.fit_s:.2f}s"
        line = f"prompts: token-exact, {len(self.shapes)} {how} with {self.source}"
        if self.unfit:
            worst = max(self.unfit, key=lambda u: abs(u.achieved - u.planned))
            line += (
                f" — WARNING: {len(self.unfit)} could not be made exact (worst {worst.logical_id}: "
                f"{worst.achieved} for {worst.planned} planned)"
            )
            if self.overheads and worst.planned < max(self.overheads.values()):
                line += f"; the chat template alone costs up to {max(self.overheads.values())} tokens"
        return line

    def summary(self) -> dict[str, object]:
        """The fit without the shapes (``load-summary.json``): how, with what, and what could not be made exact."""
        return {
            "mode": self.mode,
            "source": self.source,
            "fingerprint": self.fingerprint,
            "overheads": self.overheads,
            "filler": self.filler,
            "fitted": len(self.shapes),
            "unfit": len(self.unfit),
            "unfit_first": [asdict(u) for u in self.unfit[:20]],
            "warning": self.warning,
            "fit_s": round(self.fit_s, 3),
            "reused": self.reused,
        }

    def to_json(self) -> str:
        data = {
            "format": FORMAT,
            "mode": self.mode,
            "source": self.source,
            "fingerprint": self.fingerprint,
            "key": self.key,
            "filler": self.filler,
            "overheads": self.overheads,
            "warning": self.warning,
            "fit_s": round(self.fit_s, 3),
            "unfit": [asdict(u) for u in self.unfit],
            "prompts": {k: [s.prefix_words, s.unique_words, s.fill] for k, s in self.shapes.items()},
        }
        return json.dumps(data, separators=(",", ":")) + "\n"

    @classmethod
    def from_json(cls, text: str) -> PromptFit:
        """Raises ValueError for a file that is not a fitted-prompts file."""
        data = loads_json(text)
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} file")
        filler = str(data.get("filler") or "")
        shapes = {
            k: PromptShape(int(v[0]), int(v[1]), int(v[2]), filler if int(v[2]) else "")
            for k, v in data["prompts"].items()
        }
        return cls(
            mode=data["mode"],
            source=str(data["source"]),
            fingerprint=data.get("fingerprint"),
            filler=filler,
            overheads={k: int(v) for k, v in (data.get("overheads") or {}).items()},
            shapes=shapes,
            unfit=tuple(UnfitPrompt(**u) for u in data.get("unfit") or ()),
            warning=data.get("warning"),
            fit_s=float(data.get("fit_s") or 0.0),
            key=str(data.get("key") or ""),
        )


def read_fit(run_dir: Path) -> PromptFit | None:
    """The run's fit (None when the run has none, or the file cannot be read: logged)."""
    path = Path(run_dir) / FITTED_PROMPTS_FILE
    if not path.is_file():
        return None
    try:
        return PromptFit.from_json(read_bytes(path, root=run_dir).decode("utf-8"))
    except UnsafeFileError:
        raise
    except (OSError, ValueError, KeyError, TypeError, IndexError, OverflowError) as exc:
        log.warning("cannot read %s: %s", path, exc)
        return None


def shapes_from_text(text: str) -> dict[str, PromptShape]:
    """The shapes of a fitted-prompts file's text (what the load child builds bodies with)."""
    return PromptFit.from_json(text).shapes


def _counted_texts(pool: Pool, prefix: str, unique: str) -> list[str]:
    """The texts whose counts add up, with the overhead, to the prompt tokens the server bills."""
    if pool.endpoint is Endpoint.CHAT:
        return [prefix, unique] if prefix else [unique]
    return [completion_prompt(prefix, unique)]


def measure_overheads(
    client: httpx.Client,
    model: str,
    pools: Sequence[Pool],
    counter: TokenCounter,
    text: PromptText,
    prefix_words: Mapping[str, int],
) -> dict[str, int]:
    """Per pool: ``usage.prompt_tokens`` of one real request minus the counted content's tokens.

    The probe has the pool's own system prompt (``prefix_words`` of it, as every request of the pool), so the
    tokens the template's join to it costs are those of the pool's requests.
    Raises LoadError when the server gives no usable answer.
    """
    overheads: dict[str, int] = {}
    for pool in pools:
        probe = pool.model_copy(update={"stream": False})
        shape = PromptShape(prefix_words.get(pool.name, 0), _OVERHEAD_PROBE_WORDS)
        body = build_body(probe, model, _PROBE_ID, 0, 1, text, shape)
        prompt_tokens = _usage_prompt_tokens(client, endpoint_path(pool.endpoint), body)
        counted = sum(
            len(ids) for ids in counter.ids(_counted_texts(probe, *prompt_parts(probe, _PROBE_ID, shape, text)))
        )
        overheads[pool.name] = prompt_tokens - counted
    return overheads


def _usage_prompt_tokens(client: httpx.Client, path: str, body: bytes) -> int:
    try:
        response = client.post(path, content=body, headers={"Content-Type": "application/json"})
    except httpx.HTTPError as exc:
        raise LoadError(f"measuring the chat template's tokens: POST {path} failed: {exc}") from exc
    data = _json(response)
    usage = data.get("usage") if isinstance(data, dict) else None
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if response.status_code != 200 or not isinstance(tokens, int):
        raise LoadError(
            f"measuring the chat template's tokens: POST {path} answered HTTP {response.status_code} "
            f"without usage.prompt_tokens: {response.text[:200]}"
        )
    return tokens


@dataclass
class _FitJob:
    """One prompt being fitted: ``n`` corpus words and ``fill`` fillers after its id; ``target`` the counted text's
    tokens that make the planned length."""

    logical_id: str
    planned: int
    target: int
    constant: int  # tokens outside the counted text (overhead, system prompt)
    costs: list[int]  # estimated cost of each next corpus word
    n: int
    fill: int = 0
    best: tuple[int, int, int] | None = None  # (|diff|, n, fill)
    done: bool = False  # exact
    stuck: bool = False  # off, and no adjustment left to try


class _Fitter:
    """Fits the requests of one scenario to one tokenizer."""

    def __init__(self, counter: TokenCounter, text: PromptText) -> None:
        self.counter, self.text = counter, text
        self.costs = self._word_costs()
        self.filler = self._filler()
        self._prefix_counts: dict[str, int] = {}

    def _word_costs(self) -> dict[str, int]:
        words = corpus_vocabulary()
        ids = self.counter.ids(["the"] + [f"the {w}" for w in words])
        base = len(ids[0])
        return {w: max(1, len(i) - base) for w, i in zip(words, ids[1:])}

    def _filler(self) -> str:
        """A word that adds exactly one token each time it is appended (checked 1, 2 and 3 times)."""
        base = "the water"
        candidates = list(_FILLER_CANDIDATES) + [w for w, c in self.costs.items() if c == 1]
        for word in dict.fromkeys(candidates):
            texts = [base] + [base + f" {word}" * k for k in (1, 2, 3)]
            counts = [len(i) for i in self.counter.ids(texts)]
            if counts[1:] == [counts[0] + 1, counts[0] + 2, counts[0] + 3]:
                return word
        return ""

    def prefix_shapes(self, pools: Sequence[Pool]) -> dict[str, int]:
        """Per pool, the prefix word count whose tokens come closest to ``prefix_tokens`` without going over."""
        out: dict[str, int] = {}
        for pool in pools:
            if not pool.prefix_tokens:
                out[pool.name] = 0
                continue
            words = self.text.word_list(pool.prefix_tokens, f"prefix:{pool.name}")
            n = self._guess([self.costs.get(w, 1) for w in words], pool.prefix_tokens)
            for _ in range(MAX_ROUNDS):
                got = len(self.counter.ids([self.text.words(n, f"prefix:{pool.name}")])[0])
                if got <= pool.prefix_tokens or n == 0:
                    break
                n -= 1
            out[pool.name] = n
        return out

    @staticmethod
    def _guess(costs: list[int], budget: int) -> int:
        total = 0
        for i, c in enumerate(costs):
            if total + c > budget:
                return i
            total += c
        return len(costs)

    def job(self, pool: Pool, logical_id: str, planned: int, prefix_words: int, overhead: int) -> _FitJob:
        prefix, _ = prompt_parts(pool, logical_id, PromptShape(prefix_words, 0), self.text)
        constant = overhead
        if pool.endpoint is Endpoint.CHAT and prefix:
            if prefix not in self._prefix_counts:
                self._prefix_counts[prefix] = len(self.counter.ids([prefix])[0])
            constant += self._prefix_counts[prefix]
        words = self.text.word_list(max(planned, 1) + 8, logical_id)
        costs = [self.costs.get(w, 1) for w in words]
        base = 2 + (sum(self.costs.get(w, 1) for w in prefix.split()) if pool.endpoint is Endpoint.COMPLETIONS else 0)
        return _FitJob(
            logical_id, planned, planned - constant, constant, costs, self._guess(costs, planned - constant - base)
        )

    def run(
        self, pools: Mapping[str, Pool], jobs: list[tuple[str, _FitJob, int]]
    ) -> tuple[dict[str, PromptShape], list[UnfitPrompt]]:
        """Verify and adjust every job, all of them per round; the shapes, and the ones left unfit."""
        for _ in range(MAX_ROUNDS):
            pending = [(p, j, pw) for p, j, pw in jobs if not (j.done or j.stuck)]
            if not pending:
                break
            counts = self.counter.ids([self._counted(pools[p], j, pw) for p, j, pw in pending])
            for (_, job, _), ids in zip(pending, counts):
                self._step(job, len(ids))
        shapes = {}
        for _, job, prefix_words in jobs:
            if job.best is not None:
                job.n, job.fill = job.best[1], job.best[2]
            shapes[job.logical_id] = PromptShape(prefix_words, job.n, job.fill, self.filler if job.fill else "")
        return shapes, self._unfit(pools, [(p, j, pw) for p, j, pw in jobs if not j.done])

    def _unfit(self, pools: Mapping[str, Pool], jobs: list[tuple[str, _FitJob, int]]) -> list[UnfitPrompt]:
        """The prompts left off, with the whole context their closest make-up comes to (one batch)."""
        counts = self.counter.ids([self._counted(pools[p], j, pw) for p, j, pw in jobs]) if jobs else []
        return [UnfitPrompt(j.logical_id, j.planned, j.constant + len(ids)) for (_, j, _), ids in zip(jobs, counts)]

    def _counted(self, pool: Pool, job: _FitJob, prefix_words: int) -> str:
        shape = PromptShape(prefix_words, job.n, job.fill, self.filler)
        prefix, unique = prompt_parts(pool, job.logical_id, shape, self.text)
        return unique if pool.endpoint is Endpoint.CHAT else completion_prompt(prefix, unique)

    def _step(self, job: _FitJob, got: int) -> None:
        """Move ``n`` and ``fill`` by the estimated costs towards the target; exact: done; no move left: stuck."""
        diff = job.target - got
        if job.best is None or abs(diff) < job.best[0]:
            job.best = (abs(diff), job.n, job.fill)
        if diff == 0:
            job.done = True
            return
        n, fill = job.n, job.fill
        if diff > 0:
            while n < len(job.costs) and job.costs[n] <= diff:
                diff -= job.costs[n]
                n += 1
        else:
            take = min(fill, -diff)
            fill, diff = fill - take, diff + take
            while diff < 0 and n > 0:
                n -= 1
                diff += job.costs[n]
        if self.filler:
            fill += max(0, diff)
        if (n, fill) == (job.n, job.fill):
            job.stuck = True
        job.n, job.fill = n, fill

    def fit(
        self,
        scenario: Scenario,
        requests: Sequence[tuple[str, str, int]],
        overheads: Mapping[str, int],
        prefixes: Mapping[str, int],
    ) -> tuple[dict[str, PromptShape], list[UnfitPrompt]]:
        """Fit ``requests`` (logical id, pool, planned input tokens) with the pools' prefix word counts and
        overheads: their shapes and the unfit ones."""
        pools = {p.name: p for p in scenario.pools}
        jobs = [
            (pool, self.job(pools[pool], logical_id, planned, prefixes[pool], overheads[pool]), prefixes[pool])
            for logical_id, pool, planned in requests
        ]
        return self.run(pools, jobs)


# --- plan time ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PromptPlan:
    """What :func:`plan_prompts` needs: the load's scenario, target, model, requests and run directory."""

    scenario: Scenario
    choice: TokenizerChoice
    target_url: str
    model: str
    headers: Mapping[str, str]
    requests: Sequence[tuple[str, str, int]]  # (logical id, pool, planned input tokens)
    seed: int
    run_dir: Path


def plan_prompts(plan: PromptPlan, timeout_s: float = 30.0, transport: httpx.BaseTransport | None = None) -> PromptFit:
    """Fit the prompts (or reuse the run directory's fit with the same key) and write :data:`FITTED_PROMPTS_FILE`.

    ``words`` writes the file too (mode and warning), so the summary and the report say which rule ran.
    Raises InputError for a tokenizer file that cannot be used, LoadError when the server fails mid-fit.
    """
    start = time.monotonic()
    limits = httpx.Limits(max_keepalive_connections=_THREADS, max_connections=_THREADS)
    client = httpx.Client(
        base_url=plan.target_url, headers=dict(plan.headers), timeout=timeout_s, limits=limits, transport=transport
    )
    with client:
        fit = _fit_or_reuse(plan, client)
    fit = replace(fit, fit_s=fit.fit_s if fit.reused else time.monotonic() - start)
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    _write(plan.run_dir / FITTED_PROMPTS_FILE, fit.to_json())
    return fit


def _fit_or_reuse(plan: PromptPlan, client: httpx.Client) -> PromptFit:
    if plan.choice.kind == "words":
        return PromptFit("words", "tokenizer: words")
    counter: TokenCounter
    if plan.choice.kind == "file":
        assert plan.choice.path is not None
        counter = FileTokenizer(plan.choice.path)
    else:
        found, why = ServerTokenizer.probe(client, plan.model)
        if found is None:
            return PromptFit("words", "fallback", warning=f"prompts not token-exact: {why}; one token per word")
        counter = found
    fitter = _Fitter(counter, PromptText(plan.seed))
    prefixes = fitter.prefix_shapes(plan.scenario.pools)
    try:
        overheads = measure_overheads(client, plan.model, plan.scenario.pools, counter, fitter.text, prefixes)
    except LoadError as exc:
        return PromptFit("words", "fallback", warning=f"prompts not token-exact: {exc}; one token per word")
    fingerprint = _fingerprint(counter, overheads)
    key = _key(plan, fingerprint)
    previous = read_fit(plan.run_dir)
    if previous is not None and previous.key == key:
        return replace(previous, reused=True)
    shapes, unfit = fitter.fit(plan.scenario, plan.requests, overheads, prefixes)
    return PromptFit(
        plan.choice.kind,
        counter.source,
        fingerprint,
        fitter.filler,
        dict(overheads),
        shapes,
        tuple(unfit),
        key=key,
    )


def _fingerprint(counter: TokenCounter, overheads: Mapping[str, int]) -> str:
    """The tokenizer as the fit saw it: the ids of a probe text and the vocabulary, and the overheads."""
    ids = counter.ids([_PROBE_TEXT, " ".join(corpus_vocabulary())])
    doc = json.dumps({"ids": ids, "overheads": dict(sorted(overheads.items()))}, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(doc.encode()).hexdigest()


def _key(plan: PromptPlan, fingerprint: str) -> str:
    pools = [p.model_dump(mode="json", include={"name", "endpoint", "prefix_tokens"}) for p in plan.scenario.pools]
    doc = json.dumps(
        {"fingerprint": fingerprint, "seed": plan.seed, "pools": pools, "requests": list(plan.requests)},
        separators=(",", ":"),
    )
    return "sha256:" + hashlib.sha256(doc.encode()).hexdigest()


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
