"""Tokenizers: load an HF tokenizer from a local directory, or build the project's small BPE one.

The built tokenizer is a byte-level BPE trained with the `tokenizers` library on text this
module generates deterministically (ReAct-style turns, tool calls, names, numbers), saved as a
normal HF tokenizer directory with turn special tokens and a chat template, so tiny models go
through exactly the code path of real ones (`transformers.AutoTokenizer`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import numpy as np

EOS_TOKEN = "<|endoftext|>"
TURN_START = "<|im_start|>"
TURN_END = "<|im_end|>"
SPECIAL_TOKENS = (EOS_TOKEN, TURN_START, TURN_END)

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_WORDS = (
    "the of and to in is was for on with as by at from which who what when where how many city river "
    "country person company born founded capital located author wrote director film year population "
    "answer question search calculate call function result total cost price each more than less "
    "first second third then after before number sum difference product divide multiply minus plus "
    "document passage title entity relation married works member team league score value item"
).split()
_TAGS = ("Thought:", "Action:", "Observation:", "Answer:", "Question:", "search[", "calculate[", "finish[",
         "call[", "Error:", "{", "}", "\"", ":", ",", "(", ")", "[", "]", "=", "+", "-", "*", "/", ".", "?")


def synthetic_corpus(num_lines: int = 4000, seed: int = 0) -> list[str]:
    """Deterministic ReAct-flavoured lines: invented names, tool calls, numbers, JSON, punctuation."""
    rng = np.random.default_rng(seed)
    syllables = ["ka", "lo", "mi", "ran", "te", "vo", "shi", "bar", "en", "dor", "qua", "zel", "pi", "nox"]
    lines = []
    for _ in range(num_lines):
        parts = []
        for _ in range(int(rng.integers(4, 16))):
            r = rng.random()
            if r < 0.45:
                parts.append(str(rng.choice(_WORDS)))
            elif r < 0.65:
                name = "".join(rng.choice(syllables, size=int(rng.integers(2, 4))))
                parts.append(name.capitalize())
            elif r < 0.8:
                parts.append(str(int(rng.integers(0, 10 ** int(rng.integers(1, 6))))))
            else:
                parts.append(str(rng.choice(_TAGS)))
        lines.append(" ".join(parts))
    return lines


def build_tokenizer(out_dir: str, *, texts: Iterable[str] | None = None, vocab_size: int = 1024,
                    seed: int = 0) -> str:
    """Trains a byte-level BPE on `texts` (default: `synthetic_corpus(seed=seed)`) and saves it as an HF dir.

    The vocabulary holds the 256 byte symbols, so any text (any Unicode) encodes and decodes
    losslessly. Returns `out_dir`.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 256 + len(SPECIAL_TOKENS) + 1:
        raise ValueError(f"vocab_size={vocab_size} is too small: byte-level BPE needs at least "
                         f"{256 + len(SPECIAL_TOKENS) + 1}")
    texts = list(synthetic_corpus(seed=seed) if texts is None else texts)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS_TOKEN, pad_token=EOS_TOKEN,
                                   additional_special_tokens=[TURN_START, TURN_END])
    fast.chat_template = CHAT_TEMPLATE
    os.makedirs(out_dir, exist_ok=True)
    fast.save_pretrained(out_dir)
    return out_dir


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


def load_tokenizer(path: str):
    """`transformers.AutoTokenizer` from a local directory; never touches the network."""
    from transformers import AutoTokenizer

    if not os.path.isdir(path):
        raise FileNotFoundError(f"tokenizer directory {path!r} does not exist or is not a directory")
    if not any(os.path.exists(os.path.join(path, name)) for name in TOKENIZER_FILES):
        raise ValueError(f"{path}: no tokenizer files (none of {list(TOKENIZER_FILES)}): a checkpoint directory "
                         "without its tokenizer needs model.tokenizer set to one")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: cannot load a tokenizer from this directory: {e}") from e
    if len(tokenizer) == 0:
        raise ValueError(f"{path}: the tokenizer loaded from this directory has no tokens")
    return tokenizer
