"""Token-exact prompts (issue 13): the fitting algorithm against local BPE tokenizers.

The tokenizers are trained here with the ``tokenizers`` library (a small vocabulary, so most corpus words
cost several tokens). A server is simulated only at the HTTP seam (``httpx.MockTransport``): llama.cpp's
``POST /tokenize`` and a chat template applied to the whole conversation before it is tokenized, so the
prompt tokens it bills are what a real server would count, boundaries included. The real llama.cpp server
is in ``tests/llamacpp/test_token_exact.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from drill.load.payload import PromptText, build_body, corpus_vocabulary, payload_digest
from drill.load.schedule import build_schedule
from drill.load.summary import render_text, summarize
from drill.load.tokenizing import (
    FITTED_PROMPTS_FILE,
    PromptPlan,
    TokenizerChoice,
    plan_prompts,
    read_fit,
)
from drill.rundir.records import RequestRecord
from drill.spec.scenario import Scenario

_TEXT = " ".join(corpus_vocabulary())
_TRAINING = [_TEXT, _TEXT.upper(), "chat-1 chat-22 completions-333 prefixed-4444 probe-0 " * 3] * 4


def _bpe(vocab_size: int, byte_level: bool) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token=None if byte_level else "[UNK]"))
    if byte_level:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
        )
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["[UNK]"], show_progress=False)
    tok.train_from_iterator(_TRAINING, trainer)
    return tok


@pytest.fixture(scope="module")
def byte_bpe() -> Tokenizer:
    return _bpe(300, byte_level=True)


@pytest.fixture(scope="module")
def meta_bpe() -> Tokenizer:
    return _bpe(420, byte_level=False)


class FakeServer:
    """A server's tokenize and usage, at the transport seam: the template is tokenized with the content.

    ``dialect``: ``llama.cpp`` (``content``; no ``content``: no tokens), ``vllm`` (``model`` and ``prompt``, 400
    without; BOS only when ``add_special_tokens``) or ``tgi`` (``inputs``, 422 without; a list of token objects).
    """

    def __init__(self, tok: Tokenizer, tokenize: bool = True, dialect: str = "llama.cpp") -> None:
        self.tok, self.tokenize, self.dialect = tok, tokenize, dialect
        self.calls = 0

    def count(self, text: str) -> int:
        return len(self.tok.encode(text, add_special_tokens=False).ids)

    def prompt_tokens(self, body: dict) -> int:
        if "messages" in body:
            chat = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in body["messages"])
            return 1 + self.count(chat + "<|im_start|>assistant\n")  # BOS, then the templated conversation
        return 1 + self.count(body["prompt"])

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        body = json.loads(request.content)
        if request.url.path == "/tokenize" and self.tokenize:
            return self._tokenize(body)
        if request.url.path in ("/v1/chat/completions", "/v1/completions"):
            usage = {"prompt_tokens": self.prompt_tokens(body), "completion_tokens": 1}
            return httpx.Response(200, json={"choices": [{"text": "x"}], "usage": usage})
        return httpx.Response(404, json={"error": "not found"})

    def _tokenize(self, body: dict) -> httpx.Response:
        encode = self.tok.encode
        if self.dialect == "llama.cpp":
            ids = encode(body["content"], add_special_tokens=False).ids if "content" in body else []
            return httpx.Response(200, json={"tokens": ids})
        if self.dialect == "vllm":
            if "prompt" not in body or "model" not in body:
                return httpx.Response(400, json={"object": "error", "message": "Field required: prompt"})
            ids = ([0] if body.get("add_special_tokens", True) else []) + encode(body["prompt"]).ids
            return httpx.Response(200, json={"tokens": ids, "count": len(ids), "max_model_len": 8192})
        if "inputs" not in body:
            return httpx.Response(422, json={"error": "missing field `inputs`"})
        ids = [0] + encode(body["inputs"]).ids  # TGI tokenizes as it validates: with the BOS
        return httpx.Response(200, json=[{"id": i, "text": "", "start": 0, "stop": 0} for i in ids])


def _scenario(input_tokens: dict, **pool: object) -> Scenario:
    base = {"name": "chat", "input_tokens": input_tokens, "output_tokens": {"dist": "fixed", "value": 4}}
    return Scenario.model_validate(
        {"seed": 3, "arrival": {"process": "poisson", "rate": 40}, "pools": [{**base, **pool}]}
    )


def _fit(scenario: Scenario, server: FakeServer, run_dir: Path, choice: str = "server", duration_s: float = 3.0):
    schedule = build_schedule(scenario, duration_s, scenario.seed)
    requests = [(r.logical_id, r.pool, r.input_tokens) for r in schedule.requests]
    plan = PromptPlan(
        scenario, TokenizerChoice.parse(choice), "http://llama", "m", {}, requests, scenario.seed, run_dir
    )
    fit = plan_prompts(plan, transport=httpx.MockTransport(server.handler))
    return schedule, fit


def _bodies(scenario: Scenario, schedule, fit) -> list[bytes]:
    pools, text = {p.name: p for p in scenario.pools}, PromptText(scenario.seed)
    return [
        build_body(
            pools[r.pool], "m", r.logical_id, r.input_tokens, r.output_tokens, text, fit.shapes.get(r.logical_id)
        )
        for r in schedule.requests
    ]


def _achieved(scenario: Scenario, server: FakeServer, schedule, fit) -> list[tuple[int, int]]:
    bodies = _bodies(scenario, schedule, fit)
    return [(r.input_tokens, server.prompt_tokens(json.loads(b))) for r, b in zip(schedule.requests, bodies)]


@pytest.mark.parametrize(
    ("lengths", "pool"),
    [
        ({"dist": "fixed", "value": 200}, {"endpoint": "chat"}),
        ({"dist": "lognormal", "mu": 5.0, "sigma": 0.6, "min": 80, "max": 900}, {"endpoint": "chat"}),
        ({"dist": "uniform", "min": 30, "max": 700}, {"endpoint": "completions", "stream": False}),
        ({"dist": "fixed", "value": 300}, {"endpoint": "chat", "prefix_tokens": 120}),
        ({"dist": "uniform", "min": 150, "max": 500}, {"endpoint": "completions", "prefix_tokens": 90}),
    ],
    ids=["chat-fixed", "chat-lognormal", "completions-uniform", "chat-prefix", "completions-prefix"],
)
def test_fitted_prompts_hit_the_planned_tokens_exactly(byte_bpe, tmp_path, lengths, pool) -> None:
    scenario = _scenario(lengths, **pool)
    server = FakeServer(byte_bpe)
    schedule, fit = _fit(scenario, server, tmp_path)
    assert fit.mode == "server" and fit.source.startswith("llama.cpp POST /tokenize")
    assert len(fit.shapes) == len(schedule.requests) > 50
    assert not fit.unfit, fit.unfit[:3]
    pairs = _achieved(scenario, server, schedule, fit)
    assert [a for _, a in pairs] == [p for p, _ in pairs]
    words = [
        len(json.loads(b).get("prompt") or json.loads(b)["messages"][-1]["content"])
        for b in _bodies(scenario, schedule, fit)
    ]
    assert min(words) > 0


@pytest.mark.parametrize(("dialect", "name"), [("vllm", "vLLM/SGLang"), ("tgi", "TGI")])
def test_vllm_sglang_and_tgi_tokenize_shapes_fit_as_exactly(byte_bpe, tmp_path, dialect, name) -> None:
    scenario = _scenario({"dist": "uniform", "min": 150, "max": 500}, prefix_tokens=40)
    server = FakeServer(byte_bpe, dialect=dialect)
    schedule, fit = _fit(scenario, server, tmp_path)
    assert fit.source.startswith(f"{name} POST /tokenize") and not fit.unfit
    pairs = _achieved(scenario, server, schedule, fit)
    assert [a for _, a in pairs] == [p for p, _ in pairs]


def test_the_words_rule_is_far_off_on_this_tokenizer(byte_bpe, tmp_path) -> None:
    """Why fitting matters: the same plan with one token per word misses by far more than 2%."""
    scenario = _scenario({"dist": "fixed", "value": 200})
    server = FakeServer(byte_bpe)
    schedule, fit = _fit(scenario, server, tmp_path, choice="words")
    assert fit.mode == "words" and not fit.shapes
    pairs = _achieved(scenario, server, schedule, fit)
    ratio = sum(a for _, a in pairs) / sum(p for p, _ in pairs)
    assert ratio > 1.2


def test_a_local_tokenizer_file_fits_as_exactly_with_the_template_measured_from_usage(byte_bpe, tmp_path) -> None:
    path = tmp_path / "tokenizer.json"
    byte_bpe.save(str(path))
    scenario = _scenario({"dist": "uniform", "min": 150, "max": 400}, prefix_tokens=50)
    server = FakeServer(byte_bpe, tokenize=False)  # no tokenize endpoint: only usage
    schedule, fit = _fit(scenario, server, tmp_path, choice=f"file:{path}")
    assert fit.mode == "file" and fit.source == f"tokenizer.json at {path}"
    assert fit.overheads == {
        "chat": server.prompt_tokens(  # per pool
            {"messages": [{"role": "system", "content": ""}, {"role": "user", "content": ""}]}
        )
    }
    assert not fit.unfit
    pairs = _achieved(scenario, server, schedule, fit)
    assert [a for _, a in pairs] == [p for p, _ in pairs]


def test_a_tokenizer_it_was_not_tuned_on_lands_within_two_percent(meta_bpe, tmp_path) -> None:
    """A Metaspace (SentencePiece-like) BPE: the template joins the content, so boundaries may cost a token."""
    scenario = _scenario({"dist": "lognormal", "mu": 5.0, "sigma": 0.5, "min": 40, "max": 800})
    server = FakeServer(meta_bpe)
    schedule, fit = _fit(scenario, server, tmp_path)
    pairs = _achieved(scenario, server, schedule, fit)
    assert all(abs(a - p) <= max(1, 0.02 * p) for p, a in pairs), [x for x in pairs if x[0] != x[1]][:5]
    assert abs(sum(a for _, a in pairs) / sum(p for p, _ in pairs) - 1) <= 0.02


def test_same_seed_and_tokenizer_give_byte_identical_requests_another_tokenizer_another_set(
    byte_bpe, meta_bpe, tmp_path
) -> None:
    scenario = _scenario({"dist": "uniform", "min": 40, "max": 400})
    digests = []
    for name, tok in (("a", byte_bpe), ("b", byte_bpe), ("c", meta_bpe)):
        schedule, fit = _fit(scenario, FakeServer(tok), tmp_path / name)
        digests.append([payload_digest(b) for b in _bodies(scenario, schedule, fit)])
    assert digests[0] == digests[1]
    assert sum(x != y for x, y in zip(digests[0], digests[2])) > len(digests[0]) // 2


def test_the_fit_is_cached_in_the_run_directory_and_refitted_for_another_tokenizer(
    byte_bpe, meta_bpe, tmp_path
) -> None:
    scenario = _scenario({"dist": "uniform", "min": 40, "max": 400})
    _, first = _fit(scenario, FakeServer(byte_bpe), tmp_path)
    assert not first.reused and (tmp_path / FITTED_PROMPTS_FILE).is_file()
    server = FakeServer(byte_bpe)
    _, again = _fit(scenario, server, tmp_path)
    assert again.reused and again.shapes == first.shapes
    _, other = _fit(scenario, FakeServer(meta_bpe), tmp_path)
    assert not other.reused and other.fingerprint != first.fingerprint
    assert read_fit(tmp_path).fingerprint == other.fingerprint


def test_a_target_without_a_tokenize_endpoint_falls_back_to_words_with_a_warning(byte_bpe, tmp_path) -> None:
    scenario = _scenario({"dist": "fixed", "value": 100})
    _, fit = _fit(scenario, FakeServer(byte_bpe, tokenize=False), tmp_path)
    assert fit.mode == "words" and not fit.shapes
    assert "no tokenize endpoint" in fit.warning and "HTTP 404" in fit.warning
    assert "WARNING" in fit.describe()
    assert read_fit(tmp_path).warning == fit.warning


def test_a_prompt_that_cannot_be_exact_is_reported(byte_bpe, tmp_path) -> None:
    """A planned length below the template's own tokens cannot be met: it is listed, not silently sent."""
    scenario = _scenario({"dist": "fixed", "value": 3})
    _, fit = _fit(scenario, FakeServer(byte_bpe), tmp_path)
    assert fit.unfit and all(u.achieved > u.planned == 3 for u in fit.unfit)
    assert "could not be made exact" in fit.describe()


def test_a_bad_tokenizer_option_is_a_located_input_error(tmp_path) -> None:
    from drill.errors import InputError

    with pytest.raises(InputError, match="tokenizer must be"):
        TokenizerChoice.parse("tiktoken")
    with pytest.raises(InputError, match="does not exist"):
        _fit(_scenario({"dist": "fixed", "value": 10}), FakeServer(None), tmp_path, choice="file:/nope.json")


def _record(pool: str, planned: int, achieved: int | None, i: int) -> RequestRecord:
    return RequestRecord(
        request_id=f"r{i}",
        logical_id=f"{pool}-{i}",
        pool=pool,
        attempt=1,
        intended_ts=100.0 + i * 0.01,
        sent_ts=100.0,
        schedule_lag_ms=0.0,
        status=200,
        ttft_ms=5.0,
        e2e_ms=9.0,
        prompt_tokens=achieved,
        completion_tokens=2,
        planned_input_tokens=planned,
        planned_output_tokens=2,
    )


def test_the_summary_shows_achieved_over_planned_per_pool_and_warns_beyond_two_percent() -> None:
    records = [_record("exact", 100, 101, i) for i in range(10)] + [_record("words", 100, 130, i) for i in range(10)]
    records.append(_record("words", 100, None, 99))  # no usage: not in the ratio
    report = summarize(records, duration_s=1.0, start_ts=100.0)
    assert report.group(pool="exact").prompt_tokens_ratio == pytest.approx(1.01)
    assert report.group(pool="words").prompt_tokens_ratio == pytest.approx(1.30)
    text = render_text(report)
    assert "prompt tokens achieved/planned" in text
    warnings = [line for line in text.splitlines() if "WARNING" in line]
    assert len(warnings) == 1 and "words" in warnings[0] and "1.300" in warnings[0]


def test_the_report_shows_the_ratio_per_pool_and_the_fallback_warning(tmp_path) -> None:
    from drill.load.tokenizing import PromptFit
    from drill.report.render import render_html, render_markdown, report_for
    from tests.report.report_kit import ReportKit

    kit = ReportKit(tmp_path / "run")
    kit.run_bounds(0, 12)
    kit.phases(baseline=(0, 10))
    kit.pool("interactive")
    kit.pool("batch")
    for i in range(8):
        kit.request(1 + i, pool="interactive", prompt_tokens=100, planned_input_tokens=100)
        kit.request(1.5 + i, pool="batch", prompt_tokens=125, planned_input_tokens=100)
    run_dir = kit.write()
    warning = "prompts not token-exact: the target has no tokenize endpoint this harness knows (...)"
    (run_dir / FITTED_PROMPTS_FILE).write_text(PromptFit("words", "fallback", warning=warning).to_json())
    report = report_for(run_dir)
    rows = {row.pool: row for row in report.prompt_tokens.rows}
    assert rows["interactive"].ratio == 1.0 and not rows["interactive"].off
    assert rows["batch"].ratio == 1.25 and rows["batch"].off and rows["batch"].requests == 8
    assert report.prompt_tokens.warnings[0] == warning and "pool batch" in report.prompt_tokens.warnings[1]
    md = render_markdown(report)
    assert "| batch | 8 | 800 | 1000 | 1.250 **more than 2% off** |" in md
    assert f"- **Warning:** {warning}" in md
    assert "more than 2% off" in render_html(report)


def test_drill_load_refuses_a_bad_tokenizer_option_before_anything_starts(tmp_path) -> None:
    from click.testing import CliRunner

    from drill.cli.main import cli

    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "arrival: {process: poisson, rate: 1}\n"
        "pools: [{name: a, input_tokens: {dist: fixed, value: 9}, output_tokens: {dist: fixed, value: 1}}]\n"
    )
    for option, message in (("tiktoken", "tokenizer must be"), ("file:/nope/tokenizer.json", "is not a file")):
        result = CliRunner().invoke(
            cli, ["load", str(scenario), "--target", "http://127.0.0.1:9", "--tokenizer", option]
        )
        assert result.exit_code == 2 and message in result.output, result.output
