"""A tiny random-weight Llama with a real byte-level BPE tokenizer, made at test time for vLLM to serve.

No model can be downloaded where the tests run, and vLLM needs a Hugging Face model folder. This file makes one:
a byte-level BPE tokenizer trained with ``tokenizers`` on a few KB of generated English, and a ``LlamaForCausalLM``
from ``transformers`` with random weights (hidden size 256, 2 layers, 4 heads of 48, about 1.6 M parameters), saved as
safetensors with its ``config.json``, tokenizer files and a ChatML chat template. The text it generates is noise;
its timings, token counts, scheduling, refusals and spans are vLLM's own. Everything is seeded, so the same
version of the libraries gives the same files.

It runs in vLLM's own virtualenv (which has ``torch`` and ``transformers``; the project's has neither), as a
script, with ``HF_HUB_OFFLINE=1`` so nothing is fetched::

    <vllm venv>/bin/python tests/vllm/model.py FOLDER
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

HIDDEN = 256
LAYERS = 2
HEADS = 4
# Not 64 (256 / 4): vLLM 0.32.0's CPU attention picks its AMX kernel for bfloat16 when the head size is a multiple
# of 32 (``_get_attn_isa`` in vllm/v1/attention/backends/cpu_attn.py); on an AMX machine where the first AMX
# instruction comes before any library asked the kernel for AMX state, the worker dies of SIGILL (measured: exit
# -4 at the first short request, 4 starts of 6). A head size of 48 takes its ``vec16`` kernel, which does not.
HEAD_DIM = 48
INTERMEDIATE = 512
VOCAB = 768
MAX_POSITIONS = 4096
SPECIALS = ("<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>")
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
_WORD_TEXT = """
the of and to in is that for it as was with be by on not this are or from at which but have an they you were all
there would their we been has when who will more no if out so said what up its about into than them can only other
new some could time these two may then do first any my now such like our over even most made after also did many
before must through back years where much your way well down should because each just those people how little
state good very make world still own see work long get here between both life being under never day same another
know while last might great old year off come since against go came right used take three place small found part
water city point line house river light number sound word story music table paper answer garden window market
letter course order field open early system report power money night green plan study rest close road common
request requests server servers token tokens prompt prompts replica replicas queue latency throughput capacity
failure failures recovery restart crash pause signal drill drills fault faults verdict phase schedule batch
"""
_WORDS = _WORD_TEXT.split()


def corpus(seed: int = 17, words: int = 1500) -> list[str]:
    """About 9 KB of English-like sentences: Zipf-weighted words, capitals, punctuation, a few numbers."""
    rng = random.Random(f"vllm-corpus:{seed}")
    weights = [1.0 / (rank + 1) ** 0.9 for rank in range(len(_WORDS))]
    lines, count = [], 0
    while count < words:
        length = rng.randint(5, 16)
        picked = rng.choices(_WORDS, weights, k=length)
        if rng.random() < 0.15:
            picked.insert(rng.randrange(length), str(rng.randint(1, 2048)))
        picked[0] = picked[0].capitalize()
        lines.append(" ".join(picked) + rng.choice(".....?!"))
        count += length
    return lines


def train_tokenizer(lines: list[str]):  # -> tokenizers.Tokenizer
    """Byte-level BPE (GPT-2's pre-tokenizer and decoder), the special tokens first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(lines, trainer)
    return tokenizer


def make_model(folder: Path) -> Path:
    """Write the tokenizer and a random-weight Llama into ``folder``; returns it."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    raw = train_tokenizer(corpus())
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        bos_token=SPECIALS[0],
        eos_token=SPECIALS[3],  # the end of a turn ends generation (the requests here set ignore_eos)
        pad_token=SPECIALS[1],
        model_max_length=MAX_POSITIONS,
    )
    tokenizer.chat_template = CHATML
    tokenizer.save_pretrained(folder)
    config = LlamaConfig(
        vocab_size=raw.get_vocab_size(),
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        head_dim=HEAD_DIM,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=raw.token_to_id(SPECIALS[0]),
        eos_token_id=raw.token_to_id(SPECIALS[3]),
        pad_token_id=raw.token_to_id(SPECIALS[1]),
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(folder, safe_serialization=True)
    facts = {"parameters": sum(p.numel() for p in model.parameters()), "vocab_size": config.vocab_size}
    (folder / "drill-model.json").write_text(json.dumps(facts), encoding="utf-8")
    return folder


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(make_model(Path(sys.argv[1])))
