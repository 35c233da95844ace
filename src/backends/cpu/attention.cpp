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
      const int64_t last = kv_len - meta.host_q_len[s] + i;  // causal: attend to positions 0..last
      const int32_t* table = meta.host_block_tables + int64_t(s) * meta.max_blocks_per_seq;
      const float* qv = q.ptr<float>() + (row * n_heads + h) * head_dim;
      float m = -std::numeric_limits<float>::infinity(), l = 0;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t p = 0; p <= last; ++p) {
        const int64_t slot = int64_t(table[p / block_size]) * block_size + p % block_size;
        const float* kv = k_cache.ptr<float>() + slot * kv_row + kvh * head_dim;
        float dot = 0;
        for (int64_t d = 0; d < head_dim; ++d) dot += qv[d] * kv[d];
        const float sc = dot * scale;
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

}  // namespace ferry
