#include "backends/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/check.h"

namespace ferry {

void paged_attention_cpu(ThreadPool& pool, const Tensor& out, const Tensor& q, const Tensor& k_cache,
                         const Tensor& v_cache, const AttentionMeta& meta, float scale) {
  const int64_t n_heads = q.shape[1], head_dim = q.shape[2];
  const int64_t block_size = k_cache.shape[1], n_kv_heads = k_cache.shape[2];
  FERRY_ASSERT(k_cache.shape[3] == head_dim && n_heads % n_kv_heads == 0 && block_size == meta.block_size);
  const int64_t group = n_heads / n_kv_heads;
  const int64_t kv_row = n_kv_heads * head_dim;  // floats per cached token

  // Flatten (sequence, query row) pairs so work splits evenly across threads.
  std::vector<std::pair<int32_t, int32_t>> rows;  // (sequence, query index within it)
  for (int32_t s = 0; s < meta.n_seqs; ++s)
    for (int32_t i = 0; i < meta.host_q_len[s]; ++i) rows.emplace_back(s, i);

  const int64_t tasks = int64_t(rows.size()) * n_heads;
  pool.parallel_for(tasks, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> acc(static_cast<size_t>(head_dim));
    for (int64_t task = t0; task < t1; ++task) {
      const auto [s, i] = rows[size_t(task / n_heads)];
      const int64_t h = task % n_heads, kvh = h / group;
      const int64_t row = meta.host_q_start[s] + i;
      const int64_t kv_len = meta.host_kv_len[s];
      const int64_t last = kv_len - meta.host_q_len[s] + i;  // causal: attend to positions first..last
      const int64_t first = meta.window > 0 ? std::max<int64_t>(0, last - meta.window + 1) : 0;
      const int32_t* table = meta.host_block_tables + int64_t(s) * meta.max_blocks_per_seq;
      const float* qv = q.ptr<float>() + (row * n_heads + h) * head_dim;
      float m = -std::numeric_limits<float>::infinity(), l = 0;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t p = first; p <= last; ++p) {
        const int64_t slot = int64_t(table[p / block_size]) * block_size + p % block_size;
        const float* kv = k_cache.ptr<float>() + slot * kv_row + kvh * head_dim;
        float dot = 0;
        for (int64_t d = 0; d < head_dim; ++d) dot += qv[d] * kv[d];
        const float sc = meta.softcap > 0 ? meta.softcap * std::tanh(dot * scale / meta.softcap) : dot * scale;
        const float m_new = std::max(m, sc);
        const float corr = std::exp(m - m_new), w = std::exp(sc - m_new);
        const float* vv = v_cache.ptr<float>() + slot * kv_row + kvh * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) acc[size_t(d)] = acc[size_t(d)] * corr + w * vv[d];
        l = l * corr + w;
        m = m_new;
      }
      float* o = out.ptr<float>() + (row * n_heads + h) * head_dim;
      for (int64_t d = 0; d < head_dim; ++d) o[d] = acc[size_t(d)] / l;
    }
  });
}

void paged_attention_fast(ThreadPool& pool, const VecKernels& kernels, const Tensor& out, const Tensor& q,
                          const Tensor& k_cache, const Tensor& v_cache, const AttentionMeta& meta, float scale) {
  const int64_t n_heads = q.shape[1], head_dim = q.shape[2];
  const int64_t block_size = k_cache.shape[1], n_kv_heads = k_cache.shape[2];
  FERRY_ASSERT(k_cache.shape[3] == head_dim && n_heads % n_kv_heads == 0 && block_size == meta.block_size);
  if (head_dim % 16 != 0 || head_dim > kAttentionMaxHeadDim)
    return paged_attention_cpu(pool, out, q, k_cache, v_cache, meta, scale);
  const int64_t group = n_heads / n_kv_heads;
  const int64_t kv_row = n_kv_heads * head_dim;  // floats per cached token
  const int max_rows = std::min(kernels.attention_max_rows, kAttentionMaxRows);
  // A tile: queries [i0, i0 + n_q) of sequence s x heads [h0, h0 + nh) of KV head kvh's group. Heads per
  // tile: the whole group when it fits (else max_rows); queries: as many as fill max_rows rows.
  const int heads_per_tile = int(std::min<int64_t>(group, max_rows));
  const int q_per_tile = std::max(1, max_rows / heads_per_tile);
  struct Task {
    int32_t s, i0, n_q;
    int32_t h0, nh;
  };
  std::vector<Task> tasks;
  for (int32_t s = 0; s < meta.n_seqs; ++s) {
    const int32_t q_len = meta.host_q_len[s];
    FERRY_CHECK(meta.host_kv_len[s] < (1 << 24), "attention: {} cached tokens exceed the CPU kernels' 2^24",
                meta.host_kv_len[s]);
    // Later queries see more keys: list tiles from the last, so the longest start first.
    const int32_t n_tiles = (q_len + q_per_tile - 1) / q_per_tile;
    for (int32_t ti = n_tiles - 1; ti >= 0; --ti) {
      // Balanced tiles: sizes differ by at most one query.
      const int32_t i0 = int32_t(int64_t(q_len) * ti / n_tiles), i1 = int32_t(int64_t(q_len) * (ti + 1) / n_tiles);
      for (int64_t kvh = 0; kvh < n_kv_heads; ++kvh) {
        const int64_t end = (kvh + 1) * group;
        for (int64_t h0 = kvh * group; h0 < end; h0 += heads_per_tile)
          tasks.push_back({s, i0, i1 - i0, int32_t(h0), int32_t(std::min<int64_t>(heads_per_tile, end - h0))});
      }
    }
  }
  const float* qd = q.ptr<float>();
  float* od = out.ptr<float>();
  pool.run_chunks(int64_t(tasks.size()), [&](int64_t ti) {
    const Task& tk = tasks[size_t(ti)];
    const int64_t row = meta.host_q_start[tk.s] + tk.i0;
    const int64_t kvh = tk.h0 / group;
    AttentionTile t;
    t.q = qd + (row * n_heads + tk.h0) * head_dim;
    t.q_stride = n_heads * head_dim;
    t.out = od + (row * n_heads + tk.h0) * head_dim;
    t.out_stride = n_heads * head_dim;
    t.n_q = tk.n_q;
    t.n_heads = tk.nh;
    t.head_dim = head_dim;
    t.first_last = meta.host_kv_len[tk.s] - meta.host_q_len[tk.s] + tk.i0;
    t.block_table = meta.host_block_tables + int64_t(tk.s) * meta.max_blocks_per_seq;
    t.block_size = block_size;
    t.k = k_cache.ptr<float>() + kvh * head_dim;
    t.v = v_cache.ptr<float>() + kvh * head_dim;
    t.kv_row = kv_row;
    t.scale = scale;
    t.window = meta.window;
    t.softcap = meta.softcap;
    kernels.attention(t);
  });
}

}  // namespace ferry
