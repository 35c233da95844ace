#!/usr/bin/env python3
"""Computes reference logits and greedy continuations with transformers (float32, CPU) for ferry's tests.

    /opt/refvenv/bin/python reference/make_logits_golden.py [--models tiny-llama,tiny-qwen3,smollm2]

For each model and each of 3 fixed prompts (token ids):
  * teacher-forced logits at every prompt position (one forward over the prompt);
  * the greedy continuation of 32 tokens (argmax every step, EOS does not stop it), computed step by step
    with transformers' KV cache and cross-checked against a single forward over prompt + continuation.

Output, in tests/golden/logits/:
  <model>.json         model, prompts, greedy continuations, vocab_size, dtype note, layout, versions
  <model>.bin          float32 little-endian logits, prompt-major, then position-major, vocab contiguous:
                       prompt p, position i, token v is at ((sum_{q<p} len(prompts[q])) + i) * vocab + v
  <model>.greedy.bin   tiny models only: the 32 distributions the greedy tokens were taken from, same order
                       (prompt-major, step-major, vocab contiguous). Step 0 repeats the last prompt position.

Models:
  tiny-llama, tiny-qwen3  tests/fixtures/models/<name> (make_tiny_models.py); prompts are random ids
                          (fixed seed) of lengths 7..16 drawn from the non-special ids 3..511.
  smollm2                 models/SmolLM2-135M-Instruct.Q4_1.gguf, dequantized to float32 by transformers'
                          GGUF loader, so the reference is the exact float32 model the Q4_1 weights encode;
                          ferry's quantized kernels differ from it by their activation rounding only.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN_DIR = os.path.join(ROOT, "tests", "golden", "logits")
N_GREEDY = 32
SEED = 1234

SMOLLM2_DIR = os.path.join(ROOT, "models")
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Three varied prompts: a ChatML chat turn, plain prose, and a chat turn with a system message and code.
SMOLLM2_PROMPTS = [
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "The ferry left the harbour at dawn, and the passengers",
    "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWrite a Python hello world.<|im_end|>\n"
    "<|im_start|>assistant\n",
]


def versions():
    import gguf
    import tokenizers
    import transformers
    from importlib.metadata import version
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "gguf": version("gguf"), "tokenizers": tokenizers.__version__, "numpy": np.__version__}


def load_tiny(name):
    from transformers import AutoModelForCausalLM
    path = os.path.join(ROOT, "tests", "fixtures", "models", name)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    gen = np.random.default_rng(SEED + sum(map(ord, name)))
    lengths = [7, 11, 16]
    prompts = [[int(t) for t in gen.integers(3, model.config.vocab_size, size=n)] for n in lengths]
    return model, prompts, None, os.path.relpath(path, ROOT)


def check_gguf_qk_unpermute(model):
    """llama.cpp's converter permutes the rows of Q and K (rotate-half pairs -> interleaved pairs);
    transformers' GGUF loader must undo that. Re-apply llama.cpp's permutation to the loaded weights and
    compare with the raw dequantized GGUF tensors: they must match exactly."""
    import gguf
    from gguf.quants import dequantize
    reader = gguf.GGUFReader(os.path.join(SMOLLM2_DIR, SMOLLM2_GGUF))
    raw = {t.name: t for t in reader.tensors}
    cfg = model.config

    def llama_cpp_permute(w, n_head):
        return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    for layer in (0, cfg.num_hidden_layers - 1):
        attn = model.model.layers[layer].self_attn
        for kind, proj, n_head in (("q", attn.q_proj, cfg.num_attention_heads),
                                   ("k", attn.k_proj, cfg.num_key_value_heads)):
            t = raw[f"blk.{layer}.attn_{kind}.weight"]
            ggml = dequantize(t.data, t.tensor_type).reshape(proj.weight.shape)
            hf = proj.weight.detach().numpy()
            assert np.array_equal(llama_cpp_permute(hf, n_head), ggml), f"layer {layer} {kind}: permutation mismatch"
            assert not np.array_equal(hf, ggml), f"layer {layer} {kind}: loader did not un-permute"
    print("  GGUF Q/K: transformers' weights = llama.cpp permutation undone (checked layers 0 and last)")


def load_smollm2():
    from transformers import AutoModelForCausalLM, AutoTokenizer
    model = AutoModelForCausalLM.from_pretrained(SMOLLM2_DIR, gguf_file=SMOLLM2_GGUF, dtype=torch.float32,
                                                 attn_implementation="eager")
    tok = AutoTokenizer.from_pretrained(SMOLLM2_DIR, gguf_file=SMOLLM2_GGUF)
    c = model.config
    rope_theta = c.rope_parameters["rope_theta"] if getattr(c, "rope_parameters", None) else c.rope_theta
    print(f"  config: layers {c.num_hidden_layers}, hidden {c.hidden_size}, heads {c.num_attention_heads}, "
          f"kv heads {c.num_key_value_heads}, head_dim {c.head_dim}, ffn {c.intermediate_size}, "
          f"vocab {c.vocab_size}, rope_theta {rope_theta}, rms_eps {c.rms_norm_eps}, "
          f"tied {c.tie_word_embeddings}")
    assert (c.num_attention_heads, c.num_key_value_heads, rope_theta) == (9, 3, 100000.0)
    assert c.tie_word_embeddings and model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    check_gguf_qk_unpermute(model)
    prompts = [tok(p, add_special_tokens=False)["input_ids"] for p in SMOLLM2_PROMPTS]
    for p, text in zip(prompts, SMOLLM2_PROMPTS):
        assert 10 <= len(p) <= 24, (len(p), text)
        assert tok.decode(p) == text
    return model, prompts, tok, os.path.relpath(os.path.join(SMOLLM2_DIR, SMOLLM2_GGUF), ROOT)


@torch.no_grad()
def greedy(model, prompt):
    """Greedy decode with the KV cache; returns tokens and the logits each was chosen from."""
    ids = torch.tensor([prompt])
    out = model(input_ids=ids, use_cache=True)
    past = out.past_key_values
    logits = out.logits[0, -1]
    tokens, dists = [], []
    for _ in range(N_GREEDY):
        nxt = int(torch.argmax(logits))
        tokens.append(nxt)
        dists.append(logits.clone())
        out = model(input_ids=torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
        past = out.past_key_values
        logits = out.logits[0, -1]
    return tokens, torch.stack(dists)


@torch.no_grad()
def run_model(name, model, prompts, tok, source):
    model.eval()
    vocab = model.config.vocab_size
    entry = {"model": name, "source": source, "vocab_size": vocab, "n_greedy": N_GREEDY,
             "dtype": "transformers forward in float32 on CPU (eager attention); weights "
                      + {"tiny-llama": "stored as float32",
                         "tiny-qwen3": "stored as bfloat16, upcast exactly to float32",
                         "tiny-qwen2": "stored as float16 (q/k/v biases), upcast exactly to float32",
                         "tiny-qwen3moe": "stored as bfloat16 (8 experts, top-3, not renormalized; layer 1 "
                                          "dense), upcast exactly to float32",
                         "tiny-mixtral": "stored as float32 (6 experts, top-2)",
                         "tiny-gemma2": "stored as bfloat16 (sliding window 8 on layer 0, soft-caps 3 and 5), "
                                        "upcast exactly to float32",
                         "tiny-gemma3": "stored as bfloat16 (sliding window 8 on layers 0-1, local rope base 1e4, "
                                        "q/k norm), upcast exactly to float32",
                         "tiny-phi3": "stored as float16 (fused qkv/gate_up, longrope short factors, partial "
                                      "rotary 0.5, sliding window 8), upcast exactly to float32",
                         "smollm2": "Q4_1 in the GGUF, dequantized exactly to float32"}[name],
             "logits_file": f"{name}.bin",
             "logits_layout": "float32 LE; prompt-major, position-major, vocab contiguous; "
                              "positions per prompt = len(prompts[p])",
             "prompts": prompts, "greedy": [], "greedy_min_margin": [], "versions": versions()}
    all_logits, all_greedy = [], []
    for p, prompt in enumerate(prompts):
        logits = model(input_ids=torch.tensor([prompt])).logits[0]  # (len(prompt), vocab)
        assert logits.shape == (len(prompt), vocab) and torch.isfinite(logits).all()
        tokens, dists = greedy(model, prompt)
        # Cross-check: the cached decode agrees with one uncached forward over prompt + continuation.
        full = model(input_ids=torch.tensor([prompt + tokens[:-1]])).logits[0]
        tf = full[len(prompt) - 1:]
        rel = float(torch.linalg.norm(tf - dists) / torch.linalg.norm(dists))
        assert rel < 1e-4, f"{name} prompt {p}: cached vs uncached logits differ, rel {rel:.2e}"
        assert torch.argmax(tf, dim=-1).tolist() == tokens, f"{name} prompt {p}: greedy path not stable"
        assert torch.equal(dists[0], logits[-1]) or float(torch.max(torch.abs(dists[0] - logits[-1]))) < 1e-4
        top2 = torch.topk(dists, 2, dim=-1).values
        margin = float((top2[:, 0] - top2[:, 1]).min())
        entry["greedy"].append(tokens)
        entry["greedy_min_margin"].append(margin)
        all_logits.append(logits.numpy().astype("<f4"))
        all_greedy.append(dists.numpy().astype("<f4"))
        line = f"  prompt {p}: {len(prompt)} tokens, greedy min top1-top2 margin {margin:.4f}, logit std " \
               f"{float(logits.std()):.2f}"
        if tok is not None:
            text = tok.decode(tokens)
            entry.setdefault("prompt_texts", []).append(tok.decode(prompt))
            entry.setdefault("greedy_texts", []).append(text)
            line += f"\n    prompt: {tok.decode(prompt)!r}\n    greedy: {text!r}"
        print(line)
    os.makedirs(GOLDEN_DIR, exist_ok=True)
    np.concatenate(all_logits).tofile(os.path.join(GOLDEN_DIR, f"{name}.bin"))
    if tok is None:  # tiny models: the greedy distributions too (SmolLM2's would be 19 MB)
        entry["greedy_logits_file"] = f"{name}.greedy.bin"
        entry["greedy_logits_layout"] = ("float32 LE; prompt-major, step-major, vocab contiguous; n_greedy steps per "
                                         "prompt; step j holds the logits greedy[p][j] was chosen from (step 0 = "
                                         "last prompt position)")
        np.concatenate(all_greedy).tofile(os.path.join(GOLDEN_DIR, f"{name}.greedy.bin"))
    with open(os.path.join(GOLDEN_DIR, f"{name}.json"), "w") as f:
        json.dump(entry, f, indent=1)
        f.write("\n")
    size = os.path.getsize(os.path.join(GOLDEN_DIR, f"{name}.bin"))
    print(f"  wrote {name}.json, {name}.bin ({size / 1e6:.2f} MB)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tiny-llama,tiny-qwen3,tiny-qwen2,tiny-qwen3moe,tiny-mixtral,tiny-gemma2,"
                                        "tiny-gemma3,tiny-phi3,smollm2")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    for name in args.models.split(","):
        print(name)
        if name == "smollm2":
            model, prompts, tok, source = load_smollm2()
        else:
            model, prompts, tok, source = load_tiny(name)
        run_model(name, model, prompts, tok, source)


if __name__ == "__main__":
    sys.exit(main())
