// A Hugging Face model as GGUF sees it (what llama.cpp's convert_hf_to_gguf.py writes for the Llama family):
// tensor names, the architecture metadata, the tokenizer metadata, and llama's q/k row order. Used by
// `ferry quantize` (model/quantize_model.h) when its input is a Hugging Face folder.
#pragma once

#include <cstdint>
#include <string>

#include "formats/gguf.h"
#include "model/config.h"
#include "tokenizer/vocab.h"

namespace ferry {

// model.layers.3.self_attn.q_proj.weight -> blk.3.attn_q.weight, model.embed_tokens.weight -> token_embd.weight,
// ...; empty for a tensor GGUF files do not carry (rotary_emb.inv_freq, an lm_head tied to the embeddings).
// ferry::Error naming a tensor that has no GGUF name. Gemma (post_norms) names its four norms as llama.cpp does
// (post_attention_layernorm -> post_attention_norm, pre_feedforward_layernorm -> ffn_norm, post_feedforward_layernorm
// -> post_ffw_norm); Phi-3's fused qkv_proj -> attn_qkv, gate_up_proj -> ffn_up (2*hidden_dim rows).
std::string gguf_tensor_name(const std::string& hf_name, bool tied_embeddings, bool post_norms = false);

// The inverse: blk.3.attn_q.weight -> model.layers.3.self_attn.q_proj.weight, token_embd.weight ->
// model.embed_tokens.weight, output.weight -> lm_head.weight, ... ferry::Error for a name without one.
std::string hf_tensor_name(const std::string& gguf_name);

// {arch}.* keys of the config (block_count, embedding_length, heads, rope, ...) and general.architecture/name.
// Llama-3 RoPE scaling is not a key: it is the rope_freqs.weight tensor (rope_freq_divisors); Phi-3's longrope
// factors are the rope_factors_short/long.weight tensors (the caller adds them), its other values keys. Sliding
// windows: attention.sliding_window and attention.sliding_window_pattern (one bool per layer, true: local); Gemma:
// the soft-caps, attention.scale (1/sqrt(query_pre_attn_scalar): llama.cpp's gemma readers derive it instead) and
// rope.freq_base_swa (Gemma 3's local base). YaRN: rope.scaling.{type, factor, original_context_length, yarn_beta_fast,
// yarn_beta_slow} and yarn_attn_factor where the attention factor is not the default mscale (truncate false: an error).
void set_gguf_config(GgufWriter& w, const ModelConfig& c);
// rope_freqs.weight: (rope_dims/2) f32 divisors of the unscaled inverse frequencies, as Llama 3.1 GGUF files
// carry them; empty when the config has no Llama-3 scaling.
std::vector<float> rope_freq_divisors(const ModelConfig& c);

// tokenizer.ggml.*: model (gpt2 / llama), pre (the llama.cpp pre-tokenizer name whose regexes equal the
// tokenizer.json's), tokens padded to vocab_size with [PAD<id>] (unused) as convert_hf_to_gguf.py pads them,
// token types, merges, scores, special ids and flags, and tokenizer.chat_template. ferry::Error when the
// pre-tokenizer matches no name llama.cpp knows or a SentencePiece vocabulary has no scores.
void set_gguf_vocab(GgufWriter& w, const Vocab& v, int vocab_size);

// The GGUF row of row r of a Llama q_proj / k_proj weight (n_heads heads of head_dim rows): convert_hf_to_gguf.py
// reorders each head's rows from rotate_half pairs (i, i + head_dim/2) to interleaved pairs (2i, 2i + 1), so
// GGUF row h*head_dim + 2i + j holds HF row h*head_dim + j*head_dim/2 + i. Returns the HF row a GGUF row reads.
int64_t llama_qk_source_row(int64_t gguf_row, int head_dim);

}  // namespace ferry
