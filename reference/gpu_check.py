#!/usr/bin/env python3
"""Correctness of ferry against transformers on big random-weight models (the GPU machine's check).

    python3 reference/gpu_check.py --ferry .carry/ferry                 # on the GPU machine (device cuda)
    /opt/refvenv/bin/python reference/gpu_check.py --tiny --device cpu --ferry build-gchk/ferry   # self-test

For each model:
  llama3  LlamaForCausalLM, Llama-3-8B shape (32 layers, hidden 4096, 32 heads, 8 KV heads, intermediate
          14336, vocab 128256, rope_theta 5e5, Llama 3.1 "llama3" rope scaling), untied lm_head;
  qwen3   Qwen3ForCausalLM, Qwen3-8B shape (36 layers, hidden 4096, 32 heads, 8 KV heads, head_dim 128,
          intermediate 12288, vocab 151936, q/k RMSNorm, rope_theta 1e6), untied lm_head;
  qwen3moe Qwen3MoeForCausalLM, Qwen3-30B-A3B shape (48 layers, hidden 2048, 32 heads, 4 KV heads, head_dim 128,
          128 experts of 768 units, top-8 with norm_topk_prob, vocab 151936); give it --layers (e.g. 6: ~8.5 GB)
          for the reduced-depth check of the mixture-of-experts path (router N(0, (2/sqrt(hidden))^2) so that
          routing is decisive, every expert N(0, 1/fan_in));
it builds the model on --device in bfloat16 with random weights (not transformers' init, which gives nearly
flat logits: linears N(0, 1/fan_in), embeddings N(0, 0.3^2), lm_head N(0, (2/sqrt(hidden))^2) so logits
have std ~2, every RMSNorm weight 1 + N(0, 0.2^2)), saves it with save_pretrained (safetensors, 5 GB shards)
plus a small byte-level BPE tokenizer.json, runs transformers teacher-forced on 3 random prompts (37, 128
and 300 tokens; 300 > ferry's 256-token step, so ferry runs that one in two chunks), frees the GPU, runs
`ferry score --device DEVICE` on the same folder and prompts, and compares every position:
  cosine similarity of the logit vectors, KL(transformers || ferry) from float64 log-softmax, argmax agreement.
It passes when every position has cosine >= 0.999 and the mean KL over all positions is <= 1e-3.
--fp32 also runs transformers in float32 on the same bf16 weights (the exact forward of this bf16 model) and
prints how far transformers-bf16 and ferry each are from it. It is reported, not judged, but it tells a ferry
bug from reference noise: with random weights and logits of std ~2, transformers' own bf16 rounding is
already ~7e-4 mean KL from float32 at 32 layers and ~9.5e-4 at 36 (measured on a CPU with hidden 512),
so a correct ferry can land near the 1e-3 line against transformers-bf16.

--quant TYPE (a `ferry quantize` type or mix: Q4_K_M, Q6_K, Q8_0, ...) checks a quantized model against its own
dequantized weights instead: the bf16 folder is quantized by `ferry quantize` to a GGUF of TYPE, transformers loads
that GGUF (its gguf_file loader dequantizes every tensor to float32 with the gguf package, reverse-permuting Llama's
q/k rows) and runs in float32, and `ferry score` runs the same GGUF (the Llama shape without its rope scaling here,
which transformers' GGUF loader does not read). Same thresholds.

--tiny uses small shapes of the same structure (for a quick self-test on a CPU). The model folders go under
--workdir and are deleted at the end (--keep keeps them). Exit status: 0 pass, 1 fail, 2 error.
"""
import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import torch

CHECK_MIN_COSINE = 0.999
CHECK_MAX_MEAN_KL = 1e-3
SEED = 20261129
PROMPT_LENGTHS = (37, 128, 300)

# name -> (transformers class name, config keyword arguments) for the full and the tiny shapes.
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
SHAPES = {
    "llama3": ("LlamaForCausalLM", dict(
        vocab_size=128256, hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, intermediate_size=14336, max_position_embeddings=131072, rms_norm_eps=1e-5,
        rope_theta=500000.0, rope_scaling=LLAMA3_ROPE, tie_word_embeddings=False,
        bos_token_id=128000, eos_token_id=128001)),
    "qwen3": ("Qwen3ForCausalLM", dict(
        vocab_size=151936, hidden_size=4096, num_hidden_layers=36, num_attention_heads=32,
        num_key_value_heads=8, head_dim=128, intermediate_size=12288, max_position_embeddings=40960,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False,
        bos_token_id=151643, eos_token_id=151645)),
    "qwen3moe": ("Qwen3MoeForCausalLM", dict(
        vocab_size=151936, hidden_size=2048, num_hidden_layers=48, num_attention_heads=32,
        num_key_value_heads=4, head_dim=128, intermediate_size=6144, moe_intermediate_size=768, num_experts=128,
        num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False,
        bos_token_id=151643, eos_token_id=151645)),
}
# Same structure, small: GQA, llama3 scaling that bites within 300 tokens (original context 64), and Qwen3's
# head_dim (128) != hidden / heads (64).
TINY_SHAPES = {
    "llama3": ("LlamaForCausalLM", dict(
        vocab_size=1000, hidden_size=256, num_hidden_layers=4, num_attention_heads=8,
        num_key_value_heads=2, intermediate_size=640, max_position_embeddings=2048, rms_norm_eps=1e-5,
        rope_theta=500000.0, rope_scaling=dict(LLAMA3_ROPE, original_max_position_embeddings=64),
        tie_word_embeddings=False, bos_token_id=256, eos_token_id=257)),
    "qwen3": ("Qwen3ForCausalLM", dict(
        vocab_size=1200, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=128, intermediate_size=640, max_position_embeddings=2048,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False,
        bos_token_id=256, eos_token_id=257)),
    "qwen3moe": ("Qwen3MoeForCausalLM", dict(
        vocab_size=1200, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=128, intermediate_size=640, moe_intermediate_size=64, num_experts=16,
        num_experts_per_tok=4, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        max_position_embeddings=2048, rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False,
        bos_token_id=256, eos_token_id=257)),
}


def log(msg):
    print(msg, flush=True)


def make_config(cls_name, kwargs):
    import inspect
    import transformers
    config_cls = {"LlamaForCausalLM": transformers.LlamaConfig, "Qwen3ForCausalLM": transformers.Qwen3Config,
                  "Qwen3MoeForCausalLM": transformers.Qwen3MoeConfig}[cls_name]
    kw = dict(kwargs)
    rope_scaling = kw.pop("rope_scaling", None)
    if "rope_parameters" in inspect.signature(config_cls.__init__).parameters:  # transformers 5
        kw["rope_parameters"] = dict(rope_scaling or {"rope_type": "default"}, rope_theta=kw.pop("rope_theta"))
    elif rope_scaling is not None:  # transformers 4
        kw["rope_scaling"] = rope_scaling
    config = config_cls(**kw)
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    want = (rope_scaling or {}).get("rope_type", "default")
    if rope.get("rope_type", rope.get("type", "default")) != want:
        raise RuntimeError(f"transformers did not take the rope settings: {rope}")
    return config


@torch.no_grad()
def randomize(model, seed, device):
    """Weights that give non-flat logits (see the module docstring); drawn in float32, stored as bf16."""
    gen = torch.Generator(device=device).manual_seed(seed)
    hidden = model.config.hidden_size
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            w = 1.0 + 0.2 * torch.randn(p.shape, generator=gen, device=device)
        elif "embed_tokens" in name:
            w = 0.3 * torch.randn(p.shape, generator=gen, device=device)
        elif name == "lm_head.weight":
            w = (2.0 / hidden ** 0.5) * torch.randn(p.shape, generator=gen, device=device)
        elif name.endswith("mlp.gate.weight"):  # a mixture-of-experts router (E, hidden)
            w = (2.0 / hidden ** 0.5) * torch.randn(p.shape, generator=gen, device=device)
        elif p.dim() in (2, 3):  # linear (out, in), or experts stacked (E, out, in) as transformers 5 holds them
            w = torch.randn(p.shape, generator=gen, device=device) / p.shape[-1] ** 0.5
        else:
            raise RuntimeError(f"unexpected parameter {name} {tuple(p.shape)}")
        p.copy_(w)
        del w


def build_model(cls_name, config, device, seed):
    import transformers
    cls = getattr(transformers, cls_name)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # parameters are made in bf16 directly (no float32 copy of 8B)
    try:
        with torch.device(device):
            model = cls(config)
    finally:
        torch.set_default_dtype(old)
    randomize(model, seed, device)
    model.eval()
    for name, b in model.named_buffers():  # rope frequencies must stay float32, as from_pretrained leaves them
        if "inv_freq" in name and b.dtype != torch.float32:
            raise RuntimeError(f"{name} is {b.dtype}, expected float32")
    return model


def bytes_to_unicode():
    """GPT-2's byte -> printable character table (the alphabet of byte-level BPE)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def write_tokenizer(out_dir, model_vocab):
    """A small byte-level BPE (256 byte tokens, 2 merges, 2 special tokens): ferry needs a tokenizer to open
    the folder; scoring feeds token ids directly, so the ids past it are just model rows."""
    byte_chars = bytes_to_unicode()
    vocab = {byte_chars[b]: b for b in range(256)}
    merges = [["Ġ", "t"], ["h", "e"]]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    added = []
    for s in specials:
        added.append({"id": len(vocab) + len(added), "content": s, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True})
    assert len(vocab) + len(added) <= model_vocab
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    config = {"add_bos_token": False, "add_eos_token": False, "bos_token": specials[0], "eos_token": specials[1],
              "pad_token": None, "unk_token": None, "clean_up_tokenization_spaces": False,
              "model_max_length": 131072, "tokenizer_class": "PreTrainedTokenizerFast"}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)


@torch.no_grad()
def transformers_logits(model, prompts, device):
    """[(len(p), vocab) float32 CPU tensor per prompt]: teacher-forced, batch 1, no padding."""
    out = []
    for p in prompts:
        ids = torch.tensor([p], dtype=torch.long, device=device)
        out.append(model(input_ids=ids).logits[0].float().cpu())
    return out


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


def run_ferry(ferry, model_dir, prompts, device, workdir, threads):
    tokens_path = os.path.join(workdir, "tokens.json")
    out_path = os.path.join(workdir, "ferry_logits.bin")
    with open(tokens_path, "w") as f:
        json.dump({"prompts": prompts}, f)
    cmd = [ferry, "score", "-m", model_dir, "--device", device, "--tokens", tokens_path, "-o", out_path]
    if device == "cpu" and threads > 0:
        cmd += ["-t", str(threads)]
    log("  $ " + " ".join(cmd))
    r = subprocess.run(cmd, capture_output=True, text=True)
    sys.stdout.write("".join("    ferry: " + line + "\n" for line in (r.stdout + r.stderr).strip().splitlines()))
    if r.returncode != 0:
        raise RuntimeError(f"ferry score exited with status {r.returncode}")
    flat = np.fromfile(out_path, dtype="<f4")
    os.remove(out_path)
    os.remove(tokens_path)
    return flat


def quantize(ferry, model_dir, out_path, qtype):
    cmd = [ferry, "quantize", model_dir, out_path, qtype]
    log("  $ " + " ".join(cmd))
    r = subprocess.run(cmd, capture_output=True, text=True)
    tail = (r.stdout + r.stderr).strip().splitlines()[-3:]
    sys.stdout.write("".join("    ferry: " + line + "\n" for line in tail))
    if r.returncode != 0:
        raise RuntimeError(f"ferry quantize exited with status {r.returncode}")
    log(f"  {os.path.basename(out_path)}: {os.path.getsize(out_path) / 1e9:.2f} GB")


def split_rows(flat, prompts, vocab):
    total = sum(len(p) for p in prompts)
    if flat.size != total * vocab:
        raise RuntimeError(f"ferry wrote {flat.size} floats, expected {total} positions x {vocab} vocab")
    rows, start = [], 0
    for p in prompts:
        rows.append(torch.from_numpy(flat[start * vocab:(start + len(p)) * vocab].reshape(len(p), vocab).copy()))
        start += len(p)
    return rows


def compare(ref, got, device):
    """Per position of one prompt (ref, got: (n, vocab) float32): cosine, KL(ref || got), argmax equal."""
    a = ref.to(device=device, dtype=torch.float64)
    b = got.to(device=device, dtype=torch.float64)
    if not torch.isfinite(b).all():
        raise RuntimeError("ferry logits contain NaN or Inf")
    cos = torch.nn.functional.cosine_similarity(a, b, dim=-1)
    la, lb = torch.log_softmax(a, dim=-1), torch.log_softmax(b, dim=-1)
    kl = (la.exp() * (la - lb)).sum(dim=-1)
    same = a.argmax(dim=-1) == b.argmax(dim=-1)
    return cos.cpu().numpy(), kl.cpu().numpy(), same.cpu().numpy()


def check_model(name, shapes, args):
    cls_name, kwargs = shapes[name]
    dev = args.device
    timings = {}
    model_dir = os.path.join(args.workdir, name)
    shutil.rmtree(model_dir, ignore_errors=True)
    os.makedirs(model_dir)
    if args.quant:
        kwargs = dict(kwargs)
        kwargs.pop("rope_scaling", None)
    try:
        t = time.time()
        config = make_config(cls_name, kwargs)
        model = build_model(cls_name, config, dev, SEED + (1 if name == "llama3" else 2))
        timings["build"] = time.time() - t

        t = time.time()
        model.save_pretrained(model_dir, safe_serialization=True, max_shard_size="5GB")
        write_tokenizer(model_dir, config.vocab_size)
        timings["save"] = time.time() - t
        log(f"  saved {dir_bytes(model_dir) / 1e9:.2f} GB: {', '.join(sorted(os.listdir(model_dir)))}")

        gen = np.random.default_rng(SEED)
        prompts = [gen.integers(0, config.vocab_size, size=n).tolist() for n in PROMPT_LENGTHS]

        ferry_model = model_dir
        if args.quant:  # the reference is the quantized file's own dequantized weights, in float32
            del model
            gc.collect()
            gguf_name = f"{name}-{args.quant}.gguf"
            ferry_model = os.path.join(model_dir, gguf_name)
            t = time.time()
            quantize(args.ferry, model_dir, ferry_model, args.quant)
            timings["quantize"] = time.time() - t
            t = time.time()
            import transformers
            model = getattr(transformers, cls_name).from_pretrained(model_dir, gguf_file=gguf_name,
                                                                    torch_dtype=torch.float32).to(dev)
            model.eval()
            timings["dequantize"] = time.time() - t
        t = time.time()
        ref = transformers_logits(model, prompts, dev)
        if dev == "cuda":
            torch.cuda.synchronize()
        timings["transformers"] = time.time() - t
        ref32 = None
        if args.fp32 and not args.quant:
            t = time.time()
            model.float()
            ref32 = transformers_logits(model, prompts, dev)
            timings["transformers-fp32"] = time.time() - t
        del model
        gc.collect()
        if dev == "cuda":
            torch.cuda.empty_cache()
            log(f"  GPU memory still allocated by torch after freeing: {torch.cuda.memory_allocated() / 2**20:.0f} MiB")

        t = time.time()
        got = split_rows(run_ferry(args.ferry, ferry_model, prompts, dev, args.workdir, args.threads), prompts,
                         config.vocab_size)
        timings["ferry"] = time.time() - t
    finally:
        if not args.keep:
            shutil.rmtree(model_dir, ignore_errors=True)

    cmp_dev = dev if dev == "cuda" else "cpu"
    ref_std = float(torch.cat(ref).std())
    result = {"model": name, "seconds": sum(timings.values()), "logit_std": ref_std}
    log(f"  ferry vs transformers-{'fp32 on the dequantized ' + args.quant if args.quant else 'bf16'} (the check), "
        f"per prompt:")
    result["bf16"] = judge(ref, got, cmp_dev, ref_std, verbose=True)
    if ref32 is not None:
        log(f"  against transformers in float32 over the same bf16 weights (the exact forward of this model):")
        noise = judge(ref32, ref, cmp_dev, ref_std, verbose=False)
        log("    transformers-bf16: " + noise["line"])
        result["fp32"] = judge(ref32, got, cmp_dev, ref_std, verbose=False)
        log("    ferry:             " + result["fp32"]["line"])
    result["ok"] = result["bf16"]["ok"]
    log("  timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
    return result


def judge(ref, got, cmp_dev, ref_std, verbose):
    """Compares per prompt; returns the overall numbers, a one-line summary and whether the check passes."""
    if verbose:
        log(f"  {'prompt':>6} {'len':>5} {'min cos':>10} {'mean cos':>10} {'mean KL':>10} {'max KL':>10} {'argmax':>8}")
    all_cos, all_kl, all_same = [], [], []
    for i, (r, g) in enumerate(zip(ref, got)):
        cos, kl, same = compare(r, g, cmp_dev)
        all_cos.append(cos), all_kl.append(kl), all_same.append(same)
        if verbose:
            log(f"  {i:>6} {len(cos):>5} {cos.min():>10.6f} {cos.mean():>10.6f} {kl.mean():>10.2e} {kl.max():>10.2e}"
                f" {same.mean() * 100:>7.1f}%")
    cos, kl, same = np.concatenate(all_cos), np.concatenate(all_kl), np.concatenate(all_same)
    ok = bool(cos.min() >= CHECK_MIN_COSINE and kl.mean() <= CHECK_MAX_MEAN_KL and ref_std >= 0.5)
    line = (f"{'PASS' if ok else 'FAIL'}  {len(cos)} positions, min cos {cos.min():.6f}, mean KL {kl.mean():.2e}, "
            f"max KL {kl.max():.2e}, argmax {same.mean() * 100:.1f}%")
    if verbose:
        log(f"  {'all':>6} {len(cos):>5} {cos.min():>10.6f} {cos.mean():>10.6f} {kl.mean():>10.2e} {kl.max():>10.2e}"
            f" {same.mean() * 100:>7.1f}%   (transformers logits std {ref_std:.2f})")
        if ref_std < 0.5:
            log(f"  logits are nearly flat (std {ref_std:.2f}): the comparison would not notice much; failing")
    return {"ok": ok, "line": line, "min_cos": float(cos.min()), "mean_kl": float(kl.mean())}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ferry", required=True, help="path of the ferry binary")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="where both transformers and ferry run")
    ap.add_argument("--tiny", action="store_true", help="small shapes of the same structure (self-test)")
    ap.add_argument("--models", default="llama3,qwen3", help="comma-separated subset of: llama3, qwen3, qwen3moe")
    ap.add_argument("--workdir", default="/tmp/ferry-gpu-check", help="where the model folders are written")
    ap.add_argument("--keep", action="store_true", help="keep the model folders")
    ap.add_argument("--fp32", action="store_true", help="also compare both against transformers in float32")
    ap.add_argument("--threads", type=int, default=0, help="ferry CPU threads (--device cpu; 0: all)")
    ap.add_argument("--quant", default="", help="check a `ferry quantize` TYPE of each model against its own "
                    "dequantized weights (e.g. Q4_K_M, Q6_K)")
    ap.add_argument("--layers", type=int, default=0, help="override the number of layers (0: the shape's)")
    args = ap.parse_args()

    if not os.access(args.ferry, os.X_OK):
        log(f"error: --ferry {args.ferry} is not an executable file")
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        log("error: --device cuda but torch sees no CUDA device")
        return 2
    args.ferry = os.path.abspath(args.ferry)
    shapes = TINY_SHAPES if args.tiny else SHAPES
    if args.layers > 0:
        shapes = {k: (c, dict(kw, num_hidden_layers=args.layers)) for k, (c, kw) in shapes.items()}
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    for n in names:
        if n not in shapes:
            log(f"error: unknown model '{n}' (known: {', '.join(shapes)})")
            return 2
    os.makedirs(args.workdir, exist_ok=True)
    torch.manual_seed(SEED)
    import transformers
    transformers.utils.logging.disable_progress_bar()
    log(f"gpu_check: torch {torch.__version__}, transformers {transformers.__version__}, device {args.device}"
        f"{' (' + torch.cuda.get_device_name() + ')' if args.device == 'cuda' else ''}, "
        f"{'tiny' if args.tiny else 'full'} shapes, prompts {list(PROMPT_LENGTHS)}")
    t0 = time.time()
    results = []
    for n in names:
        log(f"== {n} ({shapes[n][0]}, {'tiny' if args.tiny else 'full'} shape) ==")
        try:
            results.append(check_model(n, shapes, args))
        except Exception as e:  # one model's failure must not hide the other's result
            log(f"  error: {type(e).__name__}: {e}")
            results.append({"model": n, "ok": False, "error": str(e)})
    log(f"== summary (cosine >= {CHECK_MIN_COSINE} at every position, mean KL <= {CHECK_MAX_MEAN_KL:g}) ==")
    for r in results:
        if "error" in r:
            log(f"  {r['model']:<7} FAIL  error: {r['error']}")
            continue
        ref_name = f"transformers-fp32 ({args.quant} dequantized)" if args.quant else "transformers-bf16"
        log(f"  {r['model']:<7} vs {ref_name}: {r['bf16']['line']}  ({r['seconds']:.0f} s)")
        if "fp32" in r:
            log(f"  {r['model']:<7} vs transformers-fp32: {r['fp32']['line']}  (reported, not judged)")
    log(f"  total {time.time() - t0:.0f} s")
    if os.path.isdir(args.workdir) and not args.keep and not os.listdir(args.workdir):
        os.rmdir(args.workdir)
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
