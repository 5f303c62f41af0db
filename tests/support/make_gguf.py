"""A tiny random-weight llama-architecture GGUF model for the llama.cpp conformance tests.

Written with the `gguf` package (no torch, no hub, nothing downloaded): 2 layers, f32 weights drawn
from a seeded normal distribution (std 0.02), a GPT-2 style byte-level BPE tokenizer that
llama.cpp accepts (``tokenizer.ggml.model = gpt2``, ``tokenizer.ggml.pre = gpt-2``, tokens, token
types and merges) and a ChatML chat template. Its output is gibberish; its lengths are exact with
``ignore_eos``.

The vocabulary (control tokens, byte symbols, one token per prompt word, fillers) is
``tests.support.bpe_vocab``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from tests.support.bpe_vocab import CONTROL_TOKENS, bpe_vocab

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@dataclass(frozen=True)
class TinyModel:
    path: Path
    vocab_size: int
    n_ctx_train: int
    one_token_words: tuple[str, ...]  # words that are one token with and without a leading space


def write_tiny_llama(path: Path, vocab_size: int = 8192, n_ctx_train: int = 4096, seed: int = 0,
                     n_embd: int = 64, n_layer: int = 2, n_head: int = 4, n_ff: int = 128,
                     f16: bool = False) -> TinyModel:
    """Write the model to ``path`` (deterministic for equal arguments) and describe it. ``f16``:
    the matrices in half precision (the norms stay f32), as most GGUF checkpoints ship them."""
    tokens, merges, fitted = bpe_vocab(vocab_size)
    types = [gguf.TokenType.CONTROL] * len(CONTROL_TOKENS) + [gguf.TokenType.NORMAL] * (vocab_size - len(CONTROL_TOKENS))
    rng = np.random.default_rng(seed)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float16 if f16 else np.float32)

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("llm-loadgen tiny random llama")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if f16 else gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(vocab_size)
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML_TEMPLATE)
    # numpy shape is (rows, cols) = GGUF (ne[1], ne[0]); output.weight is absent: tied to token_embd
    w.add_tensor("token_embd.weight", weight(vocab_size, n_embd))
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    for i in range(n_layer):
        for name, shape in (("attn_q", (n_embd, n_embd)), ("attn_k", (n_embd, n_embd)),
                            ("attn_v", (n_embd, n_embd)), ("attn_output", (n_embd, n_embd)),
                            ("ffn_gate", (n_ff, n_embd)), ("ffn_up", (n_ff, n_embd)),
                            ("ffn_down", (n_embd, n_ff))):
            w.add_tensor(f"blk.{i}.{name}.weight", weight(*shape))
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return TinyModel(Path(path), vocab_size, n_ctx_train, fitted)
