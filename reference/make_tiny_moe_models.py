#!/usr/bin/env python3
"""Builds the tiny checked-in mixture-of-experts Hugging Face models under tests/fixtures/models/.

    /opt/refvenv/bin/python reference/make_tiny_moe_models.py [--out tests/fixtures/models]

tiny-qwen3moe/  Qwen3MoeForCausalLM, bfloat16, one model.safetensors; 3 layers, layer 1 dense (mlp_only_layers
                [1], intermediate_size 160), layers 0 and 2 of 8 experts (moe_intermediate_size 32), top-3,
                norm_topk_prob False (the chosen softmax probabilities are NOT renormalized); q/k RMSNorm,
                head_dim 16; untied lm_head.
tiny-mixtral/   MixtralForCausalLM, float32, one model.safetensors; 2 layers of 6 experts (intermediate_size 48),
                top-2 (softmax over the chosen logits); GQA; untied lm_head.

transformers 5 holds the experts stacked in memory (mlp.experts.gate_up_proj (E, 2H, dim), down_proj (E, dim, H))
and writes them per expert, as the checkpoints on the Hub are (model.layers.N.mlp.experts.E.gate_proj.weight,
...block_sparse_moe.experts.E.w1.weight). Weights are random with the init of make_tiny_models.py (linear and
expert weights N(0, 1/fan_in), router N(0, 1/dim) * 2 so that routing is decisive, norms 1 + N(0, 0.2^2)). The
tokenizer is make_tiny_models.py's (Qwen2 split regex). Deterministic: re-running writes byte-identical files.
"""
import argparse
import os
import shutil
import sys

import torch
from transformers import MixtralConfig, MixtralForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tiny_models import (BOS_ID, EOS_ID, QWEN2_SPLIT, SEED, VOCAB_SIZE, add_legacy_rope_keys,  # noqa: E402
                              digest, write_tokenizer)


@torch.no_grad()
def randomize_moe(model, gen):
    hidden = model.config.hidden_size
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
        elif "embed_tokens" in name:
            p.copy_(0.3 * torch.randn(p.shape, generator=gen))
        elif name == "lm_head.weight":
            p.copy_((2.0 / hidden ** 0.5) * torch.randn(p.shape, generator=gen))
        elif name.endswith("mlp.gate.weight") or name.endswith("block_sparse_moe.gate.weight"):  # the router
            p.copy_(2.0 * torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5)
        elif p.dim() in (2, 3):  # linear (out, in) or stacked experts (E, out, in)
            p.copy_(torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5)
        else:
            raise RuntimeError(f"unexpected parameter {name} {tuple(p.shape)}")


def build_qwen3moe(out_dir):
    config = Qwen3MoeConfig(
        vocab_size=VOCAB_SIZE, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, intermediate_size=160, moe_intermediate_size=32, num_experts=8, num_experts_per_tok=3,
        norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[1], max_position_embeddings=512,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False, bos_token_id=BOS_ID,
        eos_token_id=EOS_ID, torch_dtype="bfloat16",
    )
    torch.manual_seed(SEED)
    model = Qwen3MoeForCausalLM(config)
    randomize_moe(model, torch.Generator().manual_seed(SEED + 4))
    model = model.to(torch.bfloat16)
    model.save_pretrained(out_dir, safe_serialization=True)
    add_legacy_rope_keys(out_dir)
    return write_tokenizer(out_dir, QWEN2_SPLIT)


def build_mixtral(out_dir):
    config = MixtralConfig(
        vocab_size=VOCAB_SIZE, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=48, num_local_experts=6, num_experts_per_tok=2, max_position_embeddings=512,
        rms_norm_eps=1e-5, rope_theta=1000000.0, sliding_window=None, tie_word_embeddings=False,
        bos_token_id=BOS_ID, eos_token_id=EOS_ID, torch_dtype="float32",
    )
    torch.manual_seed(SEED)
    model = MixtralForCausalLM(config).to(torch.float32)
    randomize_moe(model, torch.Generator().manual_seed(SEED + 5))
    model.save_pretrained(out_dir, safe_serialization=True)
    add_legacy_rope_keys(out_dir)
    return write_tokenizer(out_dir, QWEN2_SPLIT)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(root, "tests", "fixtures", "models"))
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    for name, build in [("tiny-qwen3moe", build_qwen3moe), ("tiny-mixtral", build_mixtral)]:
        out_dir = os.path.join(args.out, name)
        if os.path.isdir(out_dir):
            shutil.rmtree(out_dir)
        os.makedirs(out_dir)
        n_vocab_tok = build(out_dir)
        files = sorted(os.listdir(out_dir))
        total = sum(os.path.getsize(os.path.join(out_dir, f)) for f in files)
        print(f"{name}: {total / 1024:.0f} KiB, tokenizer vocab {n_vocab_tok}, sha256 {digest(out_dir)[:16]}")
        assert total < 1024 * 1024, f"{name} is over 1 MiB"


if __name__ == "__main__":
    sys.exit(main())
