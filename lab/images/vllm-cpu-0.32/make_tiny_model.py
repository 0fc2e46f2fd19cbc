#!/usr/bin/env python3
"""Write a tiny, randomly initialised Qwen3 (``Qwen3ForCausalLM``) that real vLLM can serve on a CPU.

Everything is made here, without the Hugging Face Hub: a byte-level BPE tokenizer trained with
``tokenizers`` on a few paragraphs written below, a ChatML chat template in the style of Qwen3's
(with ``<think>`` blocks, so ``--reasoning-parser qwen3`` has its tokens), random weights from
``transformers`` with a fixed seed. Same arguments -> same files.

    make_tiny_model.py --out DIR [--head-dim 32] [--layers 2]

``--head-dim`` must be one that vLLM's CPU attention supports (32, 64, 80, 96, 112, 128, ...);
a lab test uses 16 to make the real engine fail.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
            "<tool_call>", "</tool_call>"]

# A ChatML template like Qwen3's: system/user/assistant turns, an empty <think> block when thinking is off.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)

CORPUS = [
    "A small language model answers questions about the cluster, the fabric and the weights.",
    "Two nodes share one model: each holds half of every layer, and they talk over the fabric.",
    "The engine loads the weights, allocates its cache, and starts the server on port 8000.",
    "Hello! How can I help you today? Say hello to the nodes of the pair.",
    "The quick brown fox jumps over the lazy dog; 0123456789 + - * / = ( ) [ ] { } < > .",
    "Tokens are generated one at a time; the first token takes longest.",
    "Think about the question, then answer it in one sentence.",
]


def train_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # pylint: disable=import-outside-toplevel
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    return tok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--head-dim", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=512)
    args = parser.parse_args()

    import torch  # pylint: disable=import-outside-toplevel
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM  # pylint: disable=import-outside-toplevel

    args.out.mkdir(parents=True, exist_ok=True)
    fast = PreTrainedTokenizerFast(tokenizer_object=train_tokenizer(args.vocab), eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", chat_template=CHAT_TEMPLATE,
                                   model_max_length=4096)
    fast.save_pretrained(args.out)
    vocab = len(fast)
    heads, kv_heads = 4, 2  # divisible by TP=2
    config = Qwen3Config(
        vocab_size=(vocab + 63) // 64 * 64, hidden_size=heads * args.head_dim, intermediate_size=256,
        num_hidden_layers=args.layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        head_dim=args.head_dim, max_position_embeddings=4096, tie_word_embeddings=True,
        bos_token_id=fast.convert_tokens_to_ids("<|endoftext|>"), eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=fast.convert_tokens_to_ids("<|endoftext|>"), torch_dtype="bfloat16")
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(args.out, safe_serialization=True)
    (args.out / "lab_model.json").write_text(json.dumps(
        {"made_by": "lab/images/vllm-cpu-0.32/make_tiny_model.py", "head_dim": args.head_dim, "layers": args.layers,
         "vocab_size": config.vocab_size}, indent=1) + "\n")
    print(f"wrote {args.out}: Qwen3ForCausalLM, head_dim {args.head_dim}, {args.layers} layers, vocab {config.vocab_size}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
