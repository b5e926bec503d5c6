"""A tiny random-weight llama-architecture GGUF with a real BPE tokenizer, made at test time.

No model can be downloaded where the tests run, and llama.cpp's ``llama-server`` needs one. This module writes one
with the ``gguf`` package (llama.cpp's own GGUF writer, on PyPI): two transformer blocks of width 64, random weights
(the text it generates is noise; its timings and token counts are real), and a byte-level BPE tokenizer trained here
with the ``tokenizers`` library on a generated English corpus, so a prompt does not tokenize one token per word.

The tokenizer is written twice: into the GGUF as a ``gpt2``-model vocabulary (tokens, merges, token types,
pre-tokenizer name, special tokens, chat template) and as a Hugging Face ``tokenizer.json``, so a local tokenizer
and the server's ``/tokenize`` give the same tokens. Two tokenizers differ in vocabulary size, training corpus,
pre-tokenizer (GPT-2's and Llama-3's split rules), BOS handling and chat template: :data:`TOKENIZERS`. Everything is
seeded, so the same name gives byte-identical files.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["SERVER_ONLY_TOKENIZERS", "TOKENIZERS", "ModelFiles", "TokenizerSpec", "make_model"]

# The pre-tokenizer regex of Llama-3's tokenizer.json; llama.cpp's pre-tokenizer "llama-bpe" applies the same rule.
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

_CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Llama-2's template: the system prompt after "<<SYS>>\n" (no word prefix there), the turn in plain-text [INST] marks.
_LLAMA2_CHAT = (
    "{% if messages[0]['role'] == 'system' %}"
    "{% set sys = '<<SYS>>\\n' + messages[0]['content'] + '\\n<</SYS>>\\n\\n' %}"
    "{% set msgs = messages[1:] %}{% else %}{% set sys = '' %}{% set msgs = messages %}{% endif %}"
    "{% for message in msgs %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + (sys if loop.first else '') + message['content'] + ' [/INST]' }}"
    "{% else %}{{ ' ' + message['content'] + ' ' + eos_token }}{% endif %}{% endfor %}"
)
_LLAMA3_CHAT = (
    "{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' "
    "+ message['content'] + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)


@dataclass(frozen=True)
class TokenizerSpec:
    """How one test tokenizer is trained and how the server is told to use it."""

    name: str
    vocab_size: int
    pre: str  # llama.cpp's pre-tokenizer name: "gpt-2" or "llama-bpe"
    corpus_seed: int
    corpus_words: int
    word_share: float  # the share of the word list its corpus uses: the words left out split into pieces
    bos: str
    eos: str  # the end of a turn; llama.cpp treats it as end of generation
    specials: tuple[str, ...]
    add_bos: bool
    chat_template: str
    kind: str = "bpe"  # "bpe": byte-level BPE (a gpt2-model vocabulary); "spm": SentencePiece-style (llama-model)


TOKENIZERS: dict[str, TokenizerSpec] = {
    spec.name: spec
    for spec in (
        TokenizerSpec(
            name="gpt2-1024",
            vocab_size=1024,
            pre="gpt-2",
            corpus_seed=11,
            corpus_words=40_000,
            word_share=1.0,
            bos="<|endoftext|>",
            eos="<|im_end|>",
            specials=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
            add_bos=False,
            chat_template=_CHATML,
        ),
        TokenizerSpec(
            name="llama3-1280",
            vocab_size=1280,
            pre="llama-bpe",
            corpus_seed=23,
            corpus_words=60_000,
            word_share=0.75,
            bos="<|begin_of_text|>",
            eos="<|eot_id|>",
            specials=("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
            add_bos=True,
            chat_template=_LLAMA3_CHAT,
        ),
    )
}
#: Tokenizers only the server's own tokenize counts: their ``tokenizer.json`` is not token-identical to llama.cpp's
#: SentencePiece tokenizer for runs of whitespace, so it is written but is no local truth.
SERVER_ONLY_TOKENIZERS: dict[str, TokenizerSpec] = {
    spec.name: spec
    for spec in (
        # Llama-2 style: <unk> <s> </s>, 256 byte-fallback tokens, then "▁"-prefixed pieces scored by merge rank
        TokenizerSpec(
            name="spm-2000",
            vocab_size=2000,
            pre="default",
            corpus_seed=37,
            corpus_words=50_000,
            word_share=0.7,
            bos="<s>",
            eos="</s>",
            specials=("<unk>", "<s>", "</s>"),
            add_bos=True,
            chat_template=_LLAMA2_CHAT,
            kind="spm",
        ),
    )
}
_BYTE_TOKENS = tuple(f"<0x{b:02X}>" for b in range(256))


@dataclass(frozen=True)
class ModelFiles:
    """What :func:`make_model` wrote: the GGUF, its tokenizer as ``tokenizer.json``, and their facts."""

    gguf: Path
    tokenizer_json: Path
    tokenizer: TokenizerSpec
    vocab_size: int
    digest: str  # sha256 of the GGUF


# -- the corpus --------------------------------------------------------------------------------------------------

_WORD_TEXT = """
the of and to in is that for it as was with be by on not he this are or his from at which but have an they you were
her all she there would their we him been has when who will more no if out so said what up its about into than them
can only other new some could time these two may then do first any my now such like our over man me even most made
after also did many before must through back years where much your way well down should because each just those
people how too little state good very make world still own see men work long get here between both life being under
never day same another know while last might us great old year off come since against go came right used take three
place small found part water city point line house river light number sound word story music table paper answer
garden window market letter course order field open early system report power money night green plan study rest
close road common simple short clear round voice morning evening country village station teacher student doctor
mother father brother sister children family friend neighbour kitchen library hospital school office church bridge
mountain forest island ocean weather summer winter autumn spring machine engine question problem reason example
history science language picture person government company member service business information development
experience education interest community national important different possible available political economic
social public private special general local natural human whole free strong large young late full real best better
again always often sometimes usually quickly slowly together almost already enough perhaps really certainly simply
begin began begun bring brought build built carry carried change changed follow followed happen happened leave left
listen listened remember remembered understand understood walk walked watch watched write wrote written speak spoke
think thought believe believed decide decided explain explained describe described continue continued consider
considered develop developed provide provided include included become became appear appeared produce produced
measure measured request requests server servers token tokens prompt prompts replica replicas queue latency
throughput capacity failure failures recovery restart crash pause signal drill drills fault faults verdict phase
"""
_WORDS = _WORD_TEXT.split()
_PUNCTUATION = [",", ",", ",", ";", ":", " -"]
_ENDINGS = [".", ".", ".", ".", "?", "!"]


def _corpus(seed: int, words: int, share: float) -> list[str]:
    """Deterministic English-like sentences: Zipf-weighted words, capitals, punctuation, a few numbers."""
    rng = random.Random(f"llamacpp-corpus:{seed}")
    vocabulary = list(_WORDS)
    rng.shuffle(vocabulary)
    vocabulary = vocabulary[: max(1, round(len(vocabulary) * share))]
    weights = [1.0 / (rank + 1) ** 0.9 for rank in range(len(vocabulary))]
    lines, count = [], 0
    while count < words:
        length = rng.randint(5, 18)
        picked = rng.choices(vocabulary, weights, k=length)
        if rng.random() < 0.15:
            picked.insert(rng.randrange(length), str(rng.randint(1, 2048)))
        picked[0] = picked[0].capitalize()
        text = " ".join(w + (rng.choice(_PUNCTUATION) if rng.random() < 0.08 else "") for w in picked)
        lines.append(text + rng.choice(_ENDINGS))
        count += length
    return lines


# -- the tokenizer -----------------------------------------------------------------------------------------------


def _train(spec: TokenizerSpec):  # -> tokenizers.Tokenizer
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    if spec.kind == "spm":
        return _train_spm(spec)
    tokenizer = Tokenizer(models.BPE(ignore_merges=spec.pre == "llama-bpe"))
    if spec.pre == "llama-bpe":
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=list(spec.specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(spec.corpus_seed, spec.corpus_words, spec.word_share), trainer=trainer)
    if spec.add_bos:
        bos = tokenizer.token_to_id(spec.bos)
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{spec.bos} $A", pair=f"{spec.bos} $A $B", special_tokens=[(spec.bos, bos)]
        )
    else:
        tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    return tokenizer


def _train_spm(spec: TokenizerSpec):  # -> tokenizers.Tokenizer
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size, special_tokens=list(spec.specials + _BYTE_TOKENS), show_progress=False
    )
    tokenizer.train_from_iterator(_corpus(spec.corpus_seed, spec.corpus_words, spec.word_share), trainer=trainer)
    bos = tokenizer.token_to_id(spec.bos)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{spec.bos} $A", pair=f"{spec.bos} $A $B", special_tokens=[(spec.bos, bos)]
    )
    return tokenizer


@dataclass(frozen=True)
class _Vocab:
    tokens: list[str]
    merges: list[str]
    types: list[int]


def _vocab(tokenizer, spec: TokenizerSpec) -> _Vocab:
    import gguf

    model = json.loads(tokenizer.to_str())["model"]
    by_id = {index: token for token, index in model["vocab"].items()}
    tokens = [by_id[i] for i in range(len(by_id))]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    special = set(spec.specials)
    control, normal = gguf.TokenType.CONTROL, gguf.TokenType.NORMAL
    if spec.kind == "spm":
        kinds = {"<unk>": gguf.TokenType.UNKNOWN, **{b: gguf.TokenType.BYTE for b in _BYTE_TOKENS}}
        return _Vocab(tokens, merges, [int(kinds.get(t, control if t in special else normal)) for t in tokens])
    return _Vocab(tokens, merges, [int(control if t in special else normal) for t in tokens])


# -- the GGUF ----------------------------------------------------------------------------------------------------

_EMBED, _LAYERS, _HEADS, _KV_HEADS, _FF, _TRAIN_CTX = 64, 2, 4, 2, 192, 4096


def _write_gguf(path: Path, spec: TokenizerSpec, vocab: _Vocab) -> None:
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(f"llm-drill tiny random {spec.name}")
    writer.add_context_length(_TRAIN_CTX)
    writer.add_embedding_length(_EMBED)
    writer.add_block_count(_LAYERS)
    writer.add_feed_forward_length(_FF)
    writer.add_head_count(_HEADS)
    writer.add_head_count_kv(_KV_HEADS)
    writer.add_rope_dimension_count(_EMBED // _HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(vocab.tokens))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama" if spec.kind == "spm" else "gpt2")
    writer.add_tokenizer_pre(spec.pre)
    writer.add_token_list(vocab.tokens)
    writer.add_token_types(vocab.types)
    if spec.kind == "spm":  # SentencePiece merges by score: a piece's rank, as Llama-2's vocabulary has them
        normal = int(gguf.TokenType.NORMAL)
        writer.add_token_scores([-float(i) if t == normal else 0.0 for i, t in enumerate(vocab.types)])
        writer.add_unk_token_id(vocab.tokens.index("<unk>"))
        writer.add_add_space_prefix(True)
    else:
        writer.add_token_merges(vocab.merges)
    writer.add_bos_token_id(vocab.tokens.index(spec.bos))
    writer.add_eos_token_id(vocab.tokens.index(spec.eos))
    writer.add_add_bos_token(spec.add_bos)
    writer.add_chat_template(spec.chat_template)
    for name, array in _weights(len(vocab.tokens), spec.corpus_seed):
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _weights(n_vocab: int, seed: int) -> list[tuple[str, np.ndarray]]:
    """Random llama weights, numpy shape (out, in) = GGUF's reversed (in, out)."""
    rng = np.random.default_rng(seed)
    kv = _EMBED // _HEADS * _KV_HEADS

    def rand(*shape: int) -> np.ndarray:
        return rng.normal(0.0, 0.02, size=shape).astype(np.float32)

    tensors = [("token_embd.weight", rand(n_vocab, _EMBED)), ("output_norm.weight", np.ones(_EMBED, np.float32))]
    tensors.append(("output.weight", rand(n_vocab, _EMBED)))
    for i in range(_LAYERS):
        tensors += [
            (f"blk.{i}.attn_norm.weight", np.ones(_EMBED, np.float32)),
            (f"blk.{i}.attn_q.weight", rand(_EMBED, _EMBED)),
            (f"blk.{i}.attn_k.weight", rand(kv, _EMBED)),
            (f"blk.{i}.attn_v.weight", rand(kv, _EMBED)),
            (f"blk.{i}.attn_output.weight", rand(_EMBED, _EMBED)),
            (f"blk.{i}.ffn_norm.weight", np.ones(_EMBED, np.float32)),
            (f"blk.{i}.ffn_gate.weight", rand(_FF, _EMBED)),
            (f"blk.{i}.ffn_up.weight", rand(_FF, _EMBED)),
            (f"blk.{i}.ffn_down.weight", rand(_EMBED, _FF)),
        ]
    return tensors


def make_model(directory: Path, tokenizer: str = "gpt2-1024") -> ModelFiles:
    """Write ``<name>.gguf`` and ``<name>.tokenizer.json`` into ``directory`` (made if missing); same name, same bytes.

    ``tokenizer`` is a key of :data:`TOKENIZERS` or :data:`SERVER_ONLY_TOKENIZERS`.
    """
    spec = {**TOKENIZERS, **SERVER_ONLY_TOKENIZERS}[tokenizer]
    directory.mkdir(parents=True, exist_ok=True)
    trained = _train(spec)
    vocab = _vocab(trained, spec)
    tokenizer_json = directory / f"{spec.name}.tokenizer.json"
    tokenizer_json.write_text(trained.to_str(), encoding="utf-8")
    gguf_path = directory / f"{spec.name}.gguf"
    _write_gguf(gguf_path, spec, vocab)
    digest = hashlib.sha256(gguf_path.read_bytes()).hexdigest()
    return ModelFiles(gguf_path, tokenizer_json, spec, len(vocab.tokens), digest)
