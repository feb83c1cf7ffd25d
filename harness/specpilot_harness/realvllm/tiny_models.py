"""Builds a tiny random Llama target and a noisy copy of it as a draft, for real vLLM on CPU.

Runs inside the vLLM venv (it needs torch and transformers, which the project's venv does not have):

    .tools/vllm-venv/bin/python harness/specpilot_harness/realvllm/tiny_models.py OUT_DIR [--hidden H --layers L]

writes OUT_DIR/target and OUT_DIR/draft (hidden size 128 and 2 layers unless told). Nothing is downloaded: the BPE tokenizer is trained here on a
generated corpus. head_dim is 32 because vLLM's CPU attention crashes on head_dim 16 (docs/references.md §4).
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SEED = 1234
VOCAB_SIZE = 2048
# The draft differs from the target by this relative weight noise: acceptance well below 100% but
# clearly above 0, so per-position counters are informative.
DRAFT_NOISE = 0.05
# A plain chat template, so /v1/chat/completions works as well as /v1/completions: each message's text on
# its own line, then the assistant's turn.
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"


def corpus(lines: int = 4000) -> list[str]:
    rng = random.Random(SEED)
    syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "shi", "po", "ve", "dan", "ser", "qu", "ix", "or"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(2500)]
    words += ["the", "a", "of", "and", "to", "in", "is", "def", "return", "for", "if", "else",
              "print", "x", "y", "=", "+", "(", ")", ":", "0", "1", "2", "3"]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(5, 25))) for _ in range(lines)]


def build_tokenizer(out: Path) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def build(out_dir: Path, hidden: int = 128, layers: int = 2) -> None:
    torch.manual_seed(SEED)
    target_dir, draft_dir = out_dir / "target", out_dir / "draft"
    tokenizer = build_tokenizer(target_dir)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=hidden // 32, num_key_value_heads=hidden // 32, head_dim=32, max_position_embeddings=1024,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False, torch_dtype="float32",
    )
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(target_dir)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * p.std() * DRAFT_NOISE)
    model.save_pretrained(draft_dir)
    tokenizer.save_pretrained(draft_dir)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Build a tiny random Llama target and a noisy copy as its draft.")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--hidden", type=int, default=128, help="hidden size, a multiple of 32 (default 128)")
    parser.add_argument("--layers", type=int, default=2, help="decoder layers (default 2)")
    args = parser.parse_args()
    build(args.out_dir, args.hidden, args.layers)
