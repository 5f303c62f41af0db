"""A tiny hand-set Llama model for the vLLM conformance tests, written locally (nothing downloaded).

Run with the vLLM venv's python (it has torch and transformers):
``python -m tests.support.vllm_model OUT_DIR``. Deterministic for equal arguments.

Shape: Llama, hidden 64, 2 layers, 2 heads of size 32 (vLLM's CPU attention needs head size >= 32),
a GPT-2 style byte-level BPE tokenizer (``tests.support.bpe_vocab``: every prompt word is one
token) of 8,192 tokens plus ``<think>`` (8192) and ``</think>`` (8193), and a ChatML chat template
whose generation prompt opens the thinking: ``<|im_start|>assistant\\n<think>\\n``.

The weights are set by hand so that the output is known, whatever the prompt: every layer's
attention and MLP write nothing to the residual stream (o_proj and down_proj are zero; they are
still computed, so the engine's time per token is real), and the next token is a function of the
current one, f, set through the embedding and the (untied) output head on orthogonal directions:

    chat:        ... assistant\\n<think>\\n  ->  r1 .. r8  </think>  a1 a2 .. a16 a1 a2 ..
    completions: last prompt token x      ->  f(x): r1 (an ordinary token), or the chain it is in

``REASONING`` = r1..r8 (8 tokens, so a reasoning parser reports exactly 8 reasoning tokens before
the answer), then ``</think>``, then the 16-token answer cycle ``ANSWER`` forever (ignore_eos). The
cycle repeats, so n-gram speculative decoding (prompt lookup) finds its drafts in the output and
most are accepted. The logit of f(x) is 10 x 8 = 80 above every other token's 0: greedy or sampled
at temperature 1, the choice is the same.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

THINK, END_THINK = "<think>", "</think>"
BASE_VOCAB = 8192  # tests.support.bpe_vocab's tokens; <think> and </think> follow
VOCAB_SIZE = BASE_VOCAB + 2
HIDDEN, LAYERS, HEADS, HEAD_DIM, FFN = 64, 2, 2, 32, 128
MAX_POSITION = 4096
REASONING = ("first", "what", "about", "this", "then", "some", "other", "way")  # r1..r8
ANSWER = ("water", "house", "city", "world", "country", "school", "family", "people",
          "power", "night", "young", "place", "point", "group", "number", "great")  # a1..a16
LOGIT = 10.0
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>\\n' }}{% endif %}"
)


def write_tokenizer(out: Path) -> dict[str, int]:
    """tokenizer.json and its config; returns the vocabulary (token -> id)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from tests.support.bpe_vocab import CONTROL_TOKENS, bpe_vocab

    tokens, merges, _fitted = bpe_vocab(BASE_VOCAB)
    vocab = {tok: i for i, tok in enumerate(tokens)}
    bpe = models.BPE(vocab=vocab, merges=[tuple(m.split(" ")) for m in merges])
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in CONTROL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in (THINK, END_THINK)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=CONTROL_TOKENS[0], eos_token=CONTROL_TOKENS[0],
                                   pad_token=CONTROL_TOKENS[0])
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    full = fast.get_vocab()
    assert full[THINK] == BASE_VOCAB and full[END_THINK] == BASE_VOCAB + 1, (full[THINK], full[END_THINK])
    return full


def successor_chain(vocab: dict[str, int]) -> list[int]:
    """The ids of r1..r8, </think>, a1..a16: each token's successor is the next (a16's is a1)."""
    g = "\u0120"  # the byte-level symbol of a leading space
    ids = [vocab[g + w] for w in REASONING] + [vocab[END_THINK]] + [vocab[g + w] for w in ANSWER]
    assert len(set(ids)) == len(ids), "chain tokens must be distinct"
    return ids


def write_model(out: Path) -> dict:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    vocab = write_tokenizer(out)
    chain = successor_chain(vocab)
    config = LlamaConfig(vocab_size=VOCAB_SIZE, hidden_size=HIDDEN, intermediate_size=FFN,
                         num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=HEADS,
                         head_dim=HEAD_DIM, max_position_embeddings=MAX_POSITION, tie_word_embeddings=False,
                         bos_token_id=0, eos_token_id=0, torch_dtype="float32")
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    # direction k for chain token k; direction len(chain) for every other token
    other = len(chain)
    assert other < HIDDEN
    with torch.no_grad():
        emb = torch.zeros(VOCAB_SIZE, HIDDEN)
        emb[:, other] = 1.0
        for k, tid in enumerate(chain):
            emb[tid] = 0.0
            emb[tid, k] = 1.0
        head = torch.zeros(VOCAB_SIZE, HIDDEN)
        for k in range(len(chain)):
            nxt = chain[k + 1] if k + 1 < len(chain) else chain[len(REASONING) + 1]  # a16 -> a1
            head[nxt, k] = LOGIT
        head[chain[0], other] = LOGIT  # any other token -> r1
        model.model.embed_tokens.weight.copy_(emb)
        model.lm_head.weight.copy_(head)
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    model.save_pretrained(out, safe_serialization=True)
    facts = {"vocab_size": VOCAB_SIZE, "think_id": vocab[THINK], "end_think_id": vocab[END_THINK],
             "reasoning_ids": chain[:len(REASONING)], "answer_ids": chain[len(REASONING) + 1:],
             "max_position_embeddings": MAX_POSITION}
    (out / "llm_loadgen_model.json").write_text(json.dumps(facts, indent=1))
    return facts


if __name__ == "__main__":
    print(json.dumps(write_model(Path(sys.argv[1]))))
