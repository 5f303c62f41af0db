"""A GPT-2 style byte-level BPE vocabulary made from our prompt words, for the tiny test models.

No dependency beyond the standard library: the llama.cpp GGUF writer (``tests.support.make_gguf``) and the
vLLM model writer (``tests.support.vllm_model``, run in vLLM's own venv) both use it.

Vocabulary, in id order: 3 control tokens (``<|endoftext|>`` = BOS/EOS, ``<|im_start|>``,
``<|im_end|>``), the 256 byte symbols, then the tokens made by the merges, then fillers
(`` w<i>``) up to ``vocab_size``. The merges make every word of ``loadgen.workload.prompts.WORDS`` one token,
with and without its leading space, as long as the vocabulary has room: the chat prompt of W words
is then exactly W + constant tokens, as in a real model's vocabulary.

Merges are built one word at a time: tokenize the word with the merges so far, then append merges
joining its pieces left to right. A merge appended later has a higher rank (lower priority) than
every earlier one, so it never changes how an earlier word is tokenized.
"""

from __future__ import annotations

from loadgen.workload.prompts import WORDS

CONTROL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def byte_symbols() -> list[str]:
    """GPT-2's byte-level alphabet: byte b -> one printable character (space -> 'Ġ', '\\n' -> 'Ċ').

    Printable Latin-1 bytes map to themselves; the other 68 bytes map to chr(256 + k) in byte order.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    extra = iter(range(256, 256 + 256))
    return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


def bpe_pieces(symbols: list[str], ranks: dict[tuple[str, str], int]) -> list[str]:
    """Apply merges as llama.cpp does: repeatedly join the adjacent pair of lowest rank (leftmost
    on ties) until no adjacent pair is a merge."""
    pieces = list(symbols)
    while len(pieces) > 1:
        found = [(ranks[p], i) for i, p in enumerate(zip(pieces, pieces[1:], strict=False)) if p in ranks]
        if not found:
            break
        _, i = min(found)
        pieces[i:i + 2] = [pieces[i] + pieces[i + 1]]
    return pieces


def bpe_vocab(vocab_size: int, words: tuple[str, ...] = WORDS
              ) -> tuple[list[str], list[str], tuple[str, ...]]:
    """(tokens, merges, one-token words) for a vocabulary of exactly ``vocab_size``: the
    ``CONTROL_TOKENS`` first, then the 256 byte symbols, the merged tokens and fillers."""
    alphabet = byte_symbols()
    tokens = [*CONTROL_TOKENS, *alphabet]
    if vocab_size < len(tokens):
        raise ValueError(f"vocab_size must be >= {len(tokens)} (control tokens + 256 bytes), got {vocab_size}")
    known = set(tokens)
    ranks: dict[tuple[str, str], int] = {}
    enc = dict(zip(range(256), alphabet, strict=True))
    fitted = []
    for word in dict.fromkeys(words):  # in order, without duplicates
        trial_ranks, trial_tokens = dict(ranks), []
        for text in (word, " " + word):
            pieces = bpe_pieces([enc[b] for b in text.encode()], trial_ranks)
            while len(pieces) > 1:
                trial_ranks[(pieces[0], pieces[1])] = len(trial_ranks)
                if pieces[0] + pieces[1] not in known and pieces[0] + pieces[1] not in trial_tokens:
                    trial_tokens.append(pieces[0] + pieces[1])
                pieces = bpe_pieces(pieces, trial_ranks)
        if len(tokens) + len(trial_tokens) > vocab_size:
            continue  # no room for this word; a shorter one may still fit
        ranks = trial_ranks
        tokens += trial_tokens
        known.update(trial_tokens)
        fitted.append(word)
    tokens += [f"{enc[32]}w{i}" for i in range(vocab_size - len(tokens))]
    merges = [f"{a} {b}" for (a, b), _ in sorted(ranks.items(), key=lambda kv: kv[1])]
    return tokens, merges, tuple(fitted)
