#!/usr/bin/env python3
"""Builds the tiny checked-in Hugging Face models under tests/fixtures/models/.

    /opt/refvenv/bin/python reference/make_tiny_models.py [--out tests/fixtures/models]

tiny-llama/  LlamaForCausalLM, float32, one model.safetensors; GQA (4 heads, 2 KV heads), llama3 rope scaling,
             untied lm_head.
tiny-qwen3/  Qwen3ForCausalLM, bfloat16, sharded (model-0000k-of-0000n.safetensors + index); head_dim 32 while
             hidden/heads is 16; q/k RMSNorm; tied embeddings.
tiny-qwen2/  Qwen2ForCausalLM, float16, one file; q/k/v projection biases; untied lm_head.

Weights are random with a fixed seed, but NOT transformers' default init (std 0.02, norm weights exactly 1):
that gives nearly flat logits (greedy ties) and would not notice a loader that forgets a norm weight. Here
linear weights are N(0, 1/fan_in), embeddings N(0, 0.3^2) (so tied logits have std ~2), the untied lm_head
N(0, (2/sqrt(hidden))^2), and every RMSNorm weight is 1 + N(0, 0.2^2).

Each folder gets a byte-level BPE tokenizer (vocab 512) trained here on fixed text, with special tokens
<|endoftext|> (0), <|im_start|> (1), <|im_end|> (2) and a ChatML chat_template in tokenizer_config.json.
The script is deterministic: running it twice gives byte-identical files (checked by --check).
"""
import argparse
import hashlib
import json
import os
import shutil
import sys

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM)

SEED = 20240601
VOCAB_SIZE = 512
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2
BOS_ID, EOS_ID = 0, 2

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Pre-tokenizer regexes of the real families (Llama 3 groups digits in threes, Qwen2/3 splits every digit).
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
    r"\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
    r"\s*[\r\n]+|\s+(?!\S)|\s+"
)

TRAINING_TEXT = """\
The ferry leaves the harbour at seven in the morning and returns before the evening tide.
Passengers who arrive late will have to wait for the next crossing, which may be cancelled in bad weather.
It's a short trip: forty minutes if the sea is calm, an hour or more when the wind comes from the west.
We'll need tickets for two adults and one child, and we'd like seats on the upper deck, please.
Numbers matter too: 3 boats, 12 crossings a day, 365 days a year, 2024 timetables, 1.5 km of open water.
def forward(x, weights):\n    for layer in weights.layers:\n        x = x + layer.attention(layer.norm(x))\n    return x
The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs!
Café, naïve, résumé, Zürich, São Paulo, Kraków, 東京, Москва, Αθήνα, and emoji 🙂 are all valid UTF-8 text.
A language model predicts the next token from the tokens before it; attention lets each position look back.
User: What is the capital of France?\nAssistant: The capital of France is Paris.
User: Can you write a haiku about the sea?\nAssistant: Grey waves fold and break / salt wind over the harbour / the ferry sails on.
Questions, answers, lists, and tables:\n- one\n- two\n- three\n| a | b |\n|---|---|\n| 1 | 2 |
"""


def train_tokenizer(split_regex):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split_regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Repeat the text so frequent pairs are counted deterministically above the trainer's min frequency.
    tok.train_from_iterator([TRAINING_TEXT] * 4, trainer=trainer)
    for i, s in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s))
    return tok


def write_tokenizer(out_dir, split_regex):
    tok = train_tokenizer(split_regex)
    tok.save(os.path.join(out_dir, "tokenizer.json"), pretty=True)
    added = {
        str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                 "single_word": False, "special": True}
        for i, s in enumerate(SPECIAL_TOKENS)
    }
    config = {
        "add_bos_token": False,
        "add_eos_token": False,
        "added_tokens_decoder": added,
        "bos_token": SPECIAL_TOKENS[BOS_ID],
        "eos_token": SPECIAL_TOKENS[EOS_ID],
        "pad_token": SPECIAL_TOKENS[0],
        "unk_token": None,
        "chat_template": CHATML_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 512,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
        f.write("\n")
    special_map = {"bos_token": SPECIAL_TOKENS[BOS_ID], "eos_token": SPECIAL_TOKENS[EOS_ID],
                   "pad_token": SPECIAL_TOKENS[0]}
    with open(os.path.join(out_dir, "special_tokens_map.json"), "w") as f:
        json.dump(special_map, f, indent=2)
        f.write("\n")
    return tok.get_vocab_size()


@torch.no_grad()
def randomize(model, gen, tied):
    hidden = model.config.hidden_size
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
        elif "embed_tokens" in name:
            p.copy_(0.3 * torch.randn(p.shape, generator=gen))
        elif name == "lm_head.weight":
            assert not tied
            p.copy_((2.0 / hidden ** 0.5) * torch.randn(p.shape, generator=gen))
        elif name.endswith(".bias"):  # Qwen2's q/k/v projection biases
            p.copy_(0.1 * torch.randn(p.shape, generator=gen))
        elif p.dim() == 2:
            p.copy_(torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5)
        else:
            raise RuntimeError(f"unexpected parameter {name} {tuple(p.shape)}")


def add_legacy_rope_keys(out_dir):
    """transformers 5 writes only `rope_parameters`; real checkpoints on the Hub (and older transformers)
    carry `rope_theta` and `rope_scaling` at the top level. Write both so ferry's config reader sees the
    common layout; transformers reads either (the golden script reloads from disk to prove that)."""
    path = os.path.join(out_dir, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    rp = cfg.get("rope_parameters")
    if rp is not None:
        cfg["rope_theta"] = rp["rope_theta"]
        if rp.get("rope_type", "default") != "default":
            cfg["rope_scaling"] = {k: v for k, v in rp.items() if k != "rope_theta"}
        else:
            cfg["rope_scaling"] = None
    cfg.pop("transformers_version", None)  # keep the file independent of the exact version that wrote it
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def build_llama(out_dir):
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=160, max_position_embeddings=512, rms_norm_eps=1e-5,
        rope_theta=10000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 64},
        tie_word_embeddings=False, bos_token_id=BOS_ID, eos_token_id=EOS_ID, torch_dtype="float32",
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config).to(torch.float32)
    randomize(model, torch.Generator().manual_seed(SEED + 1), tied=False)
    model.save_pretrained(out_dir, safe_serialization=True)
    add_legacy_rope_keys(out_dir)
    return write_tokenizer(out_dir, LLAMA3_SPLIT)


def build_qwen3(out_dir):
    config = Qwen3Config(
        vocab_size=VOCAB_SIZE, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, intermediate_size=160, max_position_embeddings=512,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
        bos_token_id=BOS_ID, eos_token_id=EOS_ID, torch_dtype="bfloat16",
    )
    torch.manual_seed(SEED)
    model = Qwen3ForCausalLM(config)
    randomize(model, torch.Generator().manual_seed(SEED + 2), tied=True)
    model = model.to(torch.bfloat16)
    # ~280 KB of bf16 weights: 120KB shards give three files plus model.safetensors.index.json.
    model.save_pretrained(out_dir, safe_serialization=True, max_shard_size="120KB")
    add_legacy_rope_keys(out_dir)
    return write_tokenizer(out_dir, QWEN2_SPLIT)


def build_qwen2(out_dir):
    config = Qwen2Config(
        vocab_size=VOCAB_SIZE, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=160, max_position_embeddings=512,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False,
        bos_token_id=BOS_ID, eos_token_id=EOS_ID, torch_dtype="float16",
    )
    torch.manual_seed(SEED)
    model = Qwen2ForCausalLM(config)
    randomize(model, torch.Generator().manual_seed(SEED + 3), tied=False)
    model = model.to(torch.float16)
    model.save_pretrained(out_dir, safe_serialization=True)
    add_legacy_rope_keys(out_dir)
    return write_tokenizer(out_dir, QWEN2_SPLIT)


def digest(folder):
    h = hashlib.sha256()
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(root, "tests", "fixtures", "models"))
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    for name, build in [("tiny-llama", build_llama), ("tiny-qwen3", build_qwen3), ("tiny-qwen2", build_qwen2)]:
        out_dir = os.path.join(args.out, name)
        if os.path.isdir(out_dir):
            shutil.rmtree(out_dir)
        os.makedirs(out_dir)
        n_vocab_tok = build(out_dir)
        files = sorted(os.listdir(out_dir))
        total = sum(os.path.getsize(os.path.join(out_dir, f)) for f in files)
        print(f"{name}: {total / 1024:.0f} KiB, tokenizer vocab {n_vocab_tok}, sha256 {digest(out_dir)[:16]}")
        for f in files:
            print(f"    {f:40s} {os.path.getsize(os.path.join(out_dir, f)):8d}")
        assert total < 1024 * 1024, f"{name} is over 1 MiB"


if __name__ == "__main__":
    sys.exit(main())
