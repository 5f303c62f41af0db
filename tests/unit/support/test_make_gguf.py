"""The tiny GGUF model of the llama.cpp conformance tests: vocabulary, merges, file contents.

That llama.cpp itself tokenizes every calibration word as one token is checked against the real
server in tests/integration/test_llamacpp.py; these tests pin the construction without a server.
"""

from __future__ import annotations

import gguf
import pytest

from tests.support.bpe_vocab import CONTROL_TOKENS, bpe_pieces, bpe_vocab, byte_symbols
from tests.support.make_gguf import write_tiny_llama


def test_byte_symbols_are_gpt2s_byte_level_alphabet():
    symbols = byte_symbols()
    assert len(set(symbols)) == 256
    assert symbols[ord(" ")] == "Ġ" and symbols[ord("\n")] == "Ċ"
    assert symbols[ord("a")] == "a" and symbols[0xE9] == "é"


@pytest.mark.parametrize("vocab_size", [512, 8192])
def test_vocabulary_has_exactly_the_size_asked_and_merges_only_join_tokens(vocab_size):
    tokens, merges, words = bpe_vocab(vocab_size)
    assert len(tokens) == vocab_size and len(set(tokens)) == vocab_size
    assert tokens[:len(CONTROL_TOKENS)] == list(CONTROL_TOKENS)
    known = set(tokens)
    for merge in merges:
        left, right = merge.split(" ")
        assert left in known and right in known and left + right in known, merge
    ranks = {tuple(m.split(" ")): i for i, m in enumerate(merges)}
    enc = byte_symbols()
    for word in words:
        for text in (word, " " + word):
            assert bpe_pieces([enc[b] for b in text.encode()], ranks) == ["".join(enc[b] for b in text.encode())]


def test_a_small_vocabulary_keeps_the_words_that_fit():
    small, large = bpe_vocab(512)[2], bpe_vocab(8192)[2]
    assert 0 < len(small) < len(large)
    assert set(small) <= set(large)


def test_a_vocabulary_without_room_for_the_bytes_is_refused():
    with pytest.raises(ValueError, match="vocab_size must be >= 259"):
        bpe_vocab(100)


def test_the_file_is_deterministic_and_describes_a_two_layer_llama(tmp_path):
    a = write_tiny_llama(tmp_path / "a.gguf", vocab_size=512)
    b = write_tiny_llama(tmp_path / "b.gguf", vocab_size=512)
    c = write_tiny_llama(tmp_path / "c.gguf", vocab_size=512, seed=1)
    assert a.path.read_bytes() == b.path.read_bytes() != c.path.read_bytes()
    reader = gguf.GGUFReader(a.path)

    def value(key: str):
        return reader.fields[key].contents()

    assert value("general.architecture") == "llama"
    assert value("llama.block_count") == 2
    assert value("tokenizer.ggml.model") == "gpt2" and value("tokenizer.ggml.pre") == "gpt-2"
    assert len(value("tokenizer.ggml.tokens")) == 512
    names = {t.name for t in reader.tensors}
    assert "token_embd.weight" in names and "blk.1.ffn_down.weight" in names
