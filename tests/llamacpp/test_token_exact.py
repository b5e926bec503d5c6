"""Token-exact prompts against a real ``llama-server`` (issue 13): ``drill load`` fits every prompt to the server's
own tokenizer, and the prompt tokens the server bills land on the planned ones.

Four short runs of the real CLI (``drill load``, a few seconds of arrivals each): the default server with no
tokenizer option (its ``POST /tokenize``), the same server from its local ``tokenizer.json``, and servers with the
second test tokenizer (another vocabulary, pre-tokenizer, BOS rule and chat template, which the fitting was not
tuned on) and with a SentencePiece one (Llama-2 style vocabulary and template), with no option given.
Achieved = the server's ``usage.prompt_tokens`` in each record.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

from drill.rundir.records import read_records
from tests.llamacpp.model import SERVER_ONLY_TOKENIZERS, TOKENIZERS

REPO = Path(__file__).resolve().parents[2]


def _scenario(path: Path) -> Path:
    out = {"dist": "fixed", "value": 4}
    pools = [
        {"name": "fixed", "share": 0.3, "input_tokens": {"dist": "fixed", "value": 300}, "output_tokens": out},
        {
            "name": "sampled",
            "share": 0.3,
            "input_tokens": {"dist": "lognormal", "mu": 5.3, "sigma": 0.6, "min": 60, "max": 1200},
            "output_tokens": out,
        },
        {
            # a SentencePiece tokenizer counts a system prompt after its header's newline other than alone
            "name": "system",
            "share": 0.1,
            "prefix_tokens": 70,
            "input_tokens": {"dist": "uniform", "min": 120, "max": 500},
            "output_tokens": out,
        },
        {
            # llama.cpp's streamed completions carry usage in their last content chunk, not a chunk of its own
            "name": "streamed",
            "share": 0.15,
            "endpoint": "completions",
            "input_tokens": {"dist": "uniform", "min": 40, "max": 400},
            "output_tokens": out,
        },
        {
            "name": "prefixed",
            "share": 0.15,
            "endpoint": "completions",
            "stream": False,
            "prefix_tokens": 80,
            "input_tokens": {"dist": "uniform", "min": 150, "max": 600},
            "output_tokens": out,
        },
    ]
    doc = {"name": "token-exact", "seed": 7, "arrival": {"process": "poisson", "rate": 6}, "pools": pools}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _load(scenario: Path, url: str, out: Path, *extra: str) -> tuple[dict, str, float]:
    """``drill load`` as a user runs it: its load-summary.json, what it printed, and its wall time."""
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "drill", "load", str(scenario), "--target", url, "--duration", "4s"]
        + ["--out", str(out), "--no-progress", "--drain", "20s", *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((out / "load-summary.json").read_text())
    load = doc["load"]  # every planned arrival issued and recorded (a pool's three arrivals once went missing so)
    assert load["due"] == load["scheduled"] and load["records_lost"] == 0, load
    return doc, proc.stdout + proc.stderr, time.monotonic() - start


def _check(doc: dict, out: Path, tolerance: float) -> dict[str, float]:
    """Every request's achieved prompt tokens within ``tolerance`` of its plan; the ratio per pool."""
    records = [r for r in read_records(out / "requests.jsonl")]
    assert records and all(r.ok for r in records), [r.error_detail for r in records if not r.ok][:3]
    off = [
        (r.logical_id, r.planned_input_tokens, r.prompt_tokens)
        for r in records
        if r.prompt_tokens is None or abs(r.prompt_tokens - r.planned_input_tokens) > tolerance * r.planned_input_tokens
    ]
    assert not off, off[:5]
    groups = {g["pool"]: g for g in doc["report"]["groups"] if g["phase"] == "run"}
    ratios = {
        pool: groups[pool]["prompt_tokens_ratio"] for pool in ("fixed", "sampled", "system", "streamed", "prefixed")
    }
    assert all(abs(ratio - 1) <= tolerance for ratio in ratios.values()), ratios
    return ratios


def test_drill_load_prompts_land_on_the_planned_tokens(llama_server, llama_server_factory, tmp_path, capsys) -> None:
    scenario = _scenario(tmp_path / "scenario.yaml")

    doc, printed, wall = _load(scenario, llama_server.url, tmp_path / "server")
    assert "prompts: token-exact" in printed and "WARNING" not in printed
    prompts = doc["prompts"]
    assert prompts["mode"] == "server" and prompts["source"].startswith("llama.cpp POST /tokenize")
    assert prompts["unfit"] == 0 and prompts["warning"] is None
    ratios = {"server": _check(doc, tmp_path / "server", 0.02)}
    walls = {"server": wall}
    fits = {"server": (prompts["fitted"], prompts["fit_s"])}

    doc, _, walls["file"] = _load(
        scenario,
        llama_server.url,
        tmp_path / "file",
        "--tokenizer",
        f"file:{llama_server.tokenizer_json}",
        "--workers",
        "2",  # the fit travels to the workers with the plan
    )
    assert doc["prompts"]["mode"] == "file"
    ratios["file"] = _check(doc, tmp_path / "file", 0.02)

    other = next(name for name in TOKENIZERS if name != llama_server.model.tokenizer.name)
    second = llama_server_factory(tokenizer=other)
    doc, _, walls[other] = _load(scenario, second.url, tmp_path / "other")
    assert doc["prompts"]["mode"] == "server" and doc["prompts"]["unfit"] == 0
    fits[other] = (doc["prompts"]["fitted"], doc["prompts"]["fit_s"])
    ratios[other] = _check(doc, tmp_path / "other", 0.03)
    spm = next(iter(SERVER_ONLY_TOKENIZERS))  # SentencePiece, Llama-2's template: the fit was not tuned on it either
    doc, _, walls[spm] = _load(scenario, llama_server_factory(tokenizer=spm).url, tmp_path / "spm")
    assert doc["prompts"]["mode"] == "server" and doc["prompts"]["unfit"] == 0
    ratios[spm] = _check(doc, tmp_path / "spm", 0.03)
    with capsys.disabled():
        print(f"\n[token-exact] achieved/planned per pool: {ratios}; drill load wall s: {walls}; (fitted, s): {fits}")


def test_the_words_rule_is_off_on_this_server_and_the_summary_says_so(llama_server, tmp_path, capsys) -> None:
    """The same plan with one token per word: the summary warns that the request set is not the planned one."""
    scenario = _scenario(tmp_path / "scenario.yaml")
    doc, printed, _ = _load(scenario, llama_server.url, tmp_path / "words", "--tokenizer", "words")
    assert doc["prompts"]["mode"] == "words"
    groups = {g["pool"]: g for g in doc["report"]["groups"] if g["phase"] == "run"}
    ratios = {pool: groups[pool]["prompt_tokens_ratio"] for pool in ("fixed", "sampled", "prefixed")}
    assert all(ratio > 1.02 for ratio in ratios.values()), ratios
    assert "WARNING: pool fixed's prompts are" in printed
    with capsys.disabled():
        print(f"\n[token-exact] one token per word: achieved/planned per pool {ratios}")
