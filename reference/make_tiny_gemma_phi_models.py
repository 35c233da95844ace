#!/usr/bin/env python3
"""Builds the tiny checked-in Gemma 2, Gemma 3 and Phi-3 models under tests/fixtures/models/.

    /opt/refvenv/bin/python reference/make_tiny_gemma_phi_models.py [--out tests/fixtures/models]

tiny-gemma2/  Gemma2ForCausalLM, bfloat16; 2 layers (layer 0 local: sliding window 8, layer 1 global), 4 heads,
              2 KV heads, head_dim 16, query_pre_attn_scalar 24 (not head_dim), attention soft-cap 3, final
              logit soft-cap 5, GeGLU (gelu_pytorch_tanh), pre and post norms, embeddings scaled by sqrt(64), tied.
tiny-gemma3/  Gemma3ForCausalLM (gemma3_text), bfloat16; 3 layers (0, 1 local with window 8 and rope base 1e4; 2
              global with rope base 1e6 and linear rope scaling 4), head_dim 32 (hidden/heads is 16), q/k norm,
              query_pre_attn_scalar 24, no soft-caps, tied.
tiny-phi3/    Phi3ForCausalLM, float16; 2 layers, fused qkv_proj and gate_up_proj, GQA, partial_rotary_factor 0.5
              (8 of 16 dims rotate, as Phi-4-mini's 3/4), longrope (short and long factors, original context 256 of
              1024: attention factor sqrt(1 + ln 4 / ln 256)), sliding window 8 on every layer, untied lm_head.

The windows are shorter than the golden prompts plus their greedy continuations (7..48 tokens), so the sliding
window is exercised by prefill and decode; the script checks that it changes the logits (and that the soft-caps
do), so a test that ignored them would fail. Weights: make_tiny_models.py's init (Gemma's norm weights are stored
as w with x * (1 + w) computed, so they are N(0, 0.2^2) here: an effective 1 + N(0, 0.2^2)). Tokenizer: that
script's (Qwen2 split regex, ChatML template). Deterministic: re-running writes byte-identical files.
"""
import argparse
import copy
import json
import os
import shutil
import sys

import torch
from transformers import (Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig, Phi3Config,
                          Phi3ForCausalLM)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tiny_models import (BOS_ID, EOS_ID, QWEN2_SPLIT, SEED, VOCAB_SIZE, add_legacy_rope_keys,  # noqa: E402
                              digest, write_tokenizer)

WINDOW = 8


@torch.no_grad()
def randomize(model, gen, gemma):
    hidden = model.config.hidden_size
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            p.copy_((0.0 if gemma else 1.0) + 0.2 * torch.randn(p.shape, generator=gen))
        elif "embed_tokens" in name:
            p.copy_(0.3 * torch.randn(p.shape, generator=gen))
        elif name == "lm_head.weight":
            p.copy_((2.0 / hidden ** 0.5) * torch.randn(p.shape, generator=gen))
        elif p.dim() == 2:
            p.copy_(torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5)
        else:
            raise RuntimeError(f"unexpected parameter {name} {tuple(p.shape)}")


@torch.no_grad()
def check_teeth(model, what, **changes):
    """The logits of a 40-token prompt change when config fields are changed (e.g. no sliding window)."""
    ids = torch.randint(3, VOCAB_SIZE, (1, 40), generator=torch.Generator().manual_seed(7))
    base = model.float()(input_ids=ids).logits
    other_cfg = copy.deepcopy(model.config)
    for k, v in changes.items():
        setattr(other_cfg, k, v)
    other = type(model)(other_cfg).float()
    other.load_state_dict(model.state_dict())
    got = other(input_ids=ids).logits
    rel = float(torch.linalg.norm(got - base) / torch.linalg.norm(base))
    print(f"    {what}: logits change by rel L2 {rel:.3f}")
    assert rel > 1e-2, f"{what} does not change the logits ({rel})"


def add_gemma3_legacy_rope_keys(out_dir):
    """transformers 5 nests Gemma 3's rope_parameters by layer type; the Hub's configs carry rope_theta,
    rope_local_base_freq and rope_scaling at the top level. Write both (ferry reads either)."""
    path = os.path.join(out_dir, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    rp = cfg["rope_parameters"]
    cfg["rope_theta"] = rp["full_attention"]["rope_theta"]
    cfg["rope_local_base_freq"] = rp["sliding_attention"]["rope_theta"]
    cfg["rope_scaling"] = {k: v for k, v in rp["full_attention"].items() if k != "rope_theta"}
    cfg.pop("transformers_version", None)
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def save(model, out_dir, dtype):
    model = model.to(dtype)
    model.save_pretrained(out_dir, safe_serialization=True)
    if model.config.model_type == "gemma3_text":
        add_gemma3_legacy_rope_keys(out_dir)
    else:
        add_legacy_rope_keys(out_dir)
    return write_tokenizer(out_dir, QWEN2_SPLIT)


def build_gemma2(out_dir):
    config = Gemma2Config(
        vocab_size=VOCAB_SIZE, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, intermediate_size=160, max_position_embeddings=512, rms_norm_eps=1e-6, rope_theta=10000.0,
        query_pre_attn_scalar=24, attn_logit_softcapping=3.0, final_logit_softcapping=5.0, sliding_window=WINDOW,
        hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True, bos_token_id=BOS_ID, eos_token_id=EOS_ID,
        pad_token_id=0, attn_implementation="eager",
    )
    assert config.layer_types == ["sliding_attention", "full_attention"], config.layer_types
    torch.manual_seed(SEED)
    model = Gemma2ForCausalLM(config)
    randomize(model, torch.Generator().manual_seed(SEED + 6), gemma=True)
    model = model.to(torch.bfloat16).float()  # the teeth are checked on the weights as stored
    check_teeth(model, "sliding window 8 -> 512", sliding_window=512)
    check_teeth(model, "attention soft-cap 3 -> off", attn_logit_softcapping=None)
    check_teeth(model, "final soft-cap 5 -> off", final_logit_softcapping=None)
    return save(model, out_dir, torch.bfloat16)


def build_gemma3(out_dir):
    config = Gemma3TextConfig(
        vocab_size=VOCAB_SIZE, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
        head_dim=32, intermediate_size=160, max_position_embeddings=512, rms_norm_eps=1e-6,
        query_pre_attn_scalar=24, sliding_window=WINDOW,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
        hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True, bos_token_id=BOS_ID, eos_token_id=EOS_ID,
        pad_token_id=0, attn_implementation="eager",
    )
    torch.manual_seed(SEED)
    model = Gemma3ForCausalLM(config)
    randomize(model, torch.Generator().manual_seed(SEED + 7), gemma=True)
    model = model.to(torch.bfloat16).float()
    check_teeth(model, "sliding window 8 -> 512", sliding_window=512)
    return save(model, out_dir, torch.bfloat16)


def build_phi3(out_dir):
    half = 4  # rotated pairs per head: 16 * 0.5 / 2
    config = Phi3Config(
        vocab_size=VOCAB_SIZE, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=160, max_position_embeddings=1024, original_max_position_embeddings=256,
        rms_norm_eps=1e-5, partial_rotary_factor=0.5, sliding_window=WINDOW,
        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                         "short_factor": [1.0, 1.5, 2.5, 4.0][:half], "long_factor": [1.2, 3.0, 6.0, 11.0][:half]},
        tie_word_embeddings=False, bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=0,
        attn_implementation="eager",
    )
    torch.manual_seed(SEED)
    model = Phi3ForCausalLM(config)
    randomize(model, torch.Generator().manual_seed(SEED + 11), gemma=False)
    model = model.to(torch.float16).float()
    check_teeth(model, "sliding window 8 -> 1024", sliding_window=1024)
    return save(model, out_dir, torch.float16)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(root, "tests", "fixtures", "models"))
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    for name, build in [("tiny-gemma2", build_gemma2), ("tiny-gemma3", build_gemma3), ("tiny-phi3", build_phi3)]:
        print(name)
        out_dir = os.path.join(args.out, name)
        if os.path.isdir(out_dir):
            shutil.rmtree(out_dir)
        os.makedirs(out_dir)
        n_vocab_tok = build(out_dir)
        files = sorted(os.listdir(out_dir))
        total = sum(os.path.getsize(os.path.join(out_dir, f)) for f in files)
        print(f"  {total / 1024:.0f} KiB, tokenizer vocab {n_vocab_tok}, sha256 {digest(out_dir)[:16]}")
        assert total < 1024 * 1024, f"{name} is over 1 MiB"


if __name__ == "__main__":
    sys.exit(main())
