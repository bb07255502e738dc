"""The bundled BPE tokenizer: deterministic, lossless, loadable through transformers' AutoTokenizer."""

import pytest

from trace_jax.models.presets import BUNDLED_VOCAB
from trace_jax.models.tokenizer import TURN_END, TURN_START, build_tokenizer, load_tokenizer


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return build_tokenizer(str(tmp_path_factory.mktemp("tok")))


def test_build_is_deterministic(tokenizer_dir, tmp_path):
    again = build_tokenizer(str(tmp_path / "again"))
    with open(f"{tokenizer_dir}/tokenizer.json") as a, open(f"{again}/tokenizer.json") as b:
        assert a.read() == b.read()


def test_loads_with_autotokenizer_and_round_trips(tokenizer_dir):
    tok = load_tokenizer(tokenizer_dir)
    assert len(tok) == BUNDLED_VOCAB
    for text in ["Thought: find Kalomi.\nAction: search[Kalomi river]", "héllo 日本 🙂 \x00\t", ""]:
        assert tok.decode(tok.encode(text)) == text


def test_turn_tokens_are_single_special_ids(tokenizer_dir):
    tok = load_tokenizer(tokenizer_dir)
    start, end = tok.convert_tokens_to_ids([TURN_START, TURN_END])
    ids = tok.encode(f"{TURN_START}user\nhi{TURN_END}")
    assert ids[0] == start and ids[-1] == end
    assert tok.eos_token_id is not None and tok.pad_token_id == tok.eos_token_id


def test_chat_template_renders_turns(tokenizer_dir):
    tok = load_tokenizer(tokenizer_dir)
    text = tok.apply_chat_template([{"role": "user", "content": "2+2?"}], tokenize=False,
                                   add_generation_prompt=True)
    assert text == f"{TURN_START}user\n2+2?{TURN_END}\n{TURN_START}assistant\n"


def test_missing_directory_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing_tok"):
        load_tokenizer(str(tmp_path / "missing_tok"))


def test_directory_without_tokenizer_is_named(tmp_path):
    with pytest.raises(ValueError, match=str(tmp_path)):
        load_tokenizer(str(tmp_path))


def test_too_small_vocab_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="vocab_size"):
        build_tokenizer(str(tmp_path), vocab_size=100)
