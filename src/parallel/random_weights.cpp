#include "parallel/random_weights.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <unistd.h>

#include "core/check.h"
#include "core/dtype.h"

namespace ferry {
namespace {

constexpr const char* kPrefix = "random:";

int gen_threads() { return int(std::max(1u, std::thread::hardware_concurrency())); }

// A (rows, cols) or (cols) host tensor over new bytes: (rows * row_bytes(type, cols)) bytes.
std::pair<Tensor, std::shared_ptr<uint8_t[]>> host_tensor(DType type, int n_dims, int64_t rows, int64_t cols,
                                                          bool zeroed) {
  const size_t bytes = size_t(rows) * row_bytes(type, cols);
  std::shared_ptr<uint8_t[]> mem(zeroed ? new uint8_t[std::max<size_t>(bytes, 1)]() : new uint8_t[std::max<size_t>(bytes, 1)]);
  const Tensor t = n_dims == 1 ? Tensor::make(type, {cols}, mem.get(), Device::Cpu)
                               : Tensor::make(type, {rows, cols}, mem.get(), Device::Cpu);
  return {t, std::move(mem)};
}

// This rank's slices of a random model, generated on find(); a CPU backend keeps them, a GPU one lets them go
// once the loader moved on (the loader holds at most three tensors at once: q, k, v of a fused projection).
class RandomShardSource final : public WeightSource {
 public:
  RandomShardSource(const RandomWeightSource& base, const ShardPlan& plan, bool keep)
      : base_(base), plan_(plan), keep_(keep) {}

  std::string describe() const override { return base_.describe(); }

  const Tensor* find(const std::string& name) const override {
    const RandomTensor* t = base_.spec(name);
    if (t == nullptr) return nullptr;
    if (auto it = live_.find(name); it != live_.end()) return &it->second.first;
    const ShardPlan::Slice s = plan_.world == 1 ? ShardPlan::Slice{} : plan_.slice_of(name);
    std::pair<Tensor, std::shared_ptr<uint8_t[]>> made;
    const int nt = t->n_dims == 1 ? 1 : gen_threads();
    switch (s.kind) {
      case ShardKind::Replicated:
        made = host_tensor(t->type, t->n_dims, t->rows, t->cols, false);
        made.first = random_tensor_view(*t, made.second.get());  // stacked experts keep their 3-D shape
        fill_random_part(*t, 0, t->rows, 0, t->cols, made.second.get(), nt);
        break;
      case ShardKind::Rows:
        if (t->n_dims == 3) {  // rows [begin, begin + count) of each stacked expert: (E, count, cols)
          const int64_t per = t->rows / t->outer;
          FERRY_CHECK(s.begin + s.count <= per, "{}: cannot split '{}' by rows", describe(), name);
          made = host_tensor(t->type, 2, t->outer * s.count, t->cols, false);
          made.first = Tensor::make(t->type, {t->outer, s.count, t->cols}, made.second.get(), Device::Cpu);
          const size_t part = size_t(s.count) * row_bytes(t->type, t->cols);
          for (int64_t x = 0; x < t->outer; ++x)
            fill_random_part(*t, x * per + s.begin, s.count, 0, t->cols, made.second.get() + size_t(x) * part, nt);
          break;
        }
        FERRY_CHECK(t->n_dims == 2 && s.begin + s.count <= t->rows, "{}: cannot split '{}' by rows", describe(), name);
        made = host_tensor(t->type, 2, s.count, t->cols, false);
        fill_random_part(*t, s.begin, s.count, 0, t->cols, made.second.get(), nt);
        break;
      case ShardKind::Cols: {  // every row's columns [begin, begin + count) (of every stacked expert)
        const int block = dtype_info(t->type).block_elems;
        FERRY_CHECK(t->n_dims >= 2 && s.begin + s.count <= t->cols && s.begin % block == 0 && s.count % block == 0,
                    "{}: tensor '{}' ({}, blocks of {} values) cannot be split {} ways: each rank's {} of its {} "
                    "columns do not fall on block boundaries", describe(), name, dtype_name(t->type), block,
                    plan_.world, s.count, t->cols);
        made = host_tensor(t->type, 2, t->rows, s.count, false);
        if (t->n_dims == 3)
          made.first = Tensor::make(t->type, {t->outer, t->rows / t->outer, s.count}, made.second.get(), Device::Cpu);
        fill_random_part(*t, 0, t->rows, s.begin, s.count, made.second.get(), nt);
        break;
      }
      case ShardKind::Experts: {  // experts [begin, begin + count) of a stacked (E, rows, cols), whole
        FERRY_CHECK(t->n_dims == 3 && s.begin + s.count <= t->outer, "{}: '{}' does not hold experts {}..{}",
                    describe(), name, s.begin, s.begin + s.count - 1);
        const int64_t per = t->rows / t->outer;
        made = host_tensor(t->type, 2, s.count * per, t->cols, false);
        made.first = Tensor::make(t->type, {s.count, per, t->cols}, made.second.get(), Device::Cpu);
        fill_random_part(*t, s.begin * per, s.count * per, 0, t->cols, made.second.get(), nt);
        break;
      }
      case ShardKind::Vocab: {
        FERRY_CHECK(t->n_dims == 2 && t->rows == plan_.vocab.full, "{}: tensor '{}' is not a vocabulary matrix",
                    describe(), name);
        const int64_t held =
            std::max<int64_t>(0, std::min<int64_t>(plan_.vocab.part, plan_.vocab.full - plan_.vocab.begin));
        made = host_tensor(t->type, 2, plan_.vocab.local_rows, t->cols, true);  // zero rows: valid in every type
        if (held > 0) fill_random_part(*t, plan_.vocab.begin, held, 0, t->cols, made.second.get(), nt);
        break;
      }
    }
    base_.count_generated(name);
    order_.push_back(name);
    const Tensor* out = &live_.emplace(name, std::move(made)).first->second.first;
    if (!keep_) {
      while (order_.size() > kLive) {
        live_.erase(order_.front());
        order_.pop_front();
      }
    }
    return out;
  }

  // After load_weights: kept tensors move into weights.storage; `named` views of freed ones lose their data.
  void finish(ModelWeights& w) {
    if (keep_) {
      for (auto& [name, e] : live_) {
        std::shared_ptr<uint8_t[]> mem = e.second;
        w.storage.emplace_back(mem.get(), e.first.nbytes(), Device::Cpu, [mem](void*) mutable { mem.reset(); });
      }
    } else {
      for (auto& [name, t] : w.named) t.data = nullptr;
    }
    live_.clear();
    order_.clear();
  }

 private:
  static constexpr size_t kLive = 4;
  const RandomWeightSource& base_;
  const ShardPlan& plan_;
  bool keep_;
  mutable std::map<std::string, std::pair<Tensor, std::shared_ptr<uint8_t[]>>> live_;
  mutable std::deque<std::string> order_;
};

DType parse_type(const std::string& s) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1})
    if (s == dtype_name(t)) return t;
  fail("random model type '{}': use f32, f16, bf16, q8_0, q4_0 or q4_1", s);
}

}  // namespace

bool is_random_model_path(const std::string& path) { return path.rfind(kPrefix, 0) == 0; }

RandomWeightSource::RandomWeightSource(std::string describe, std::vector<RandomTensor> tensors,
                                       RandomProgressFn on_progress)
    : describe_(std::move(describe)), on_progress_(std::move(on_progress)) {
  for (RandomTensor& t : tensors) {
    total_bytes_ += random_tensor_view(t, nullptr).nbytes();
    std::string name = t.name;
    specs_.emplace(std::move(name), std::move(t));
  }
}

void RandomWeightSource::count_generated(const std::string& name) const {
  if (!on_progress_) return;
  const RandomTensor* t = spec(name);
  FERRY_ASSERT(t != nullptr);
  std::lock_guard lock(progress_mutex_);
  if (!generated_.insert(name).second) return;
  generated_bytes_ = std::min(total_bytes_, generated_bytes_ + random_tensor_view(*t, nullptr).nbytes());
  on_progress_(generated_bytes_, total_bytes_);  // under the lock: reports arrive in order
}

const RandomTensor* RandomWeightSource::spec(const std::string& name) const {
  auto it = specs_.find(name);
  return it == specs_.end() ? nullptr : &it->second;
}

const Tensor* RandomWeightSource::find(const std::string& name) const {
  const RandomTensor* t = spec(name);
  if (t == nullptr) return nullptr;
  if (auto it = made_.find(name); it != made_.end()) return &it->second.first;
  auto made = host_tensor(t->type, t->n_dims, t->rows, t->cols, false);
  made.first = random_tensor_view(*t, made.second.get());
  fill_random_part(*t, 0, t->rows, 0, t->cols, made.second.get(), t->n_dims == 1 ? 1 : gen_threads());
  count_generated(name);
  return &made_.emplace(name, std::move(made)).first->second.first;
}

ModelFile open_random_model(const std::string& path, RandomProgressFn on_progress) {
  FERRY_CHECK(is_random_model_path(path), "'{}' is not a random:SHAPE[:TYPE[:SEED]] model", path);
  std::vector<std::string> parts;
  size_t at = std::strlen(kPrefix);
  while (true) {
    const size_t colon = path.find(':', at);
    parts.push_back(path.substr(at, colon == std::string::npos ? std::string::npos : colon - at));
    if (colon == std::string::npos) break;
    at = colon + 1;
  }
  FERRY_CHECK(parts.size() >= 1 && parts.size() <= 4 && !parts[0].empty(),
              "model '{}': expected random:SHAPE[:TYPE[:SEED[:INIT]]], e.g. random:llama3-8b:bf16 or "
              "random:llama3-8b:bf16:1:peaked",
              path);
  ModelConfig config = random_model_config(parts[0]);
  const RandomInit init = parts.size() > 3 ? parse_random_init(parts[3]) : RandomInit::Flat;
  if (init != RandomInit::Flat) config.name += std::string(" ") + random_init_name(init);
  const DType type = parse_type(parts.size() > 1 ? parts[1] : "bf16");
  uint64_t seed = 1;
  if (parts.size() > 2) {
    const std::string& text = parts[2];
    char* end = nullptr;
    errno = 0;
    seed = std::strtoull(text.c_str(), &end, 10);
    // strtoull accepts a sign and wraps "-5" around: only plain digits that fit are a seed.
    FERRY_CHECK(!text.empty() && std::isdigit(static_cast<unsigned char>(text[0])) && end && *end == '\0' &&
                    errno != ERANGE,
                "model '{}': the seed '{}' is not a number from 0 to 2^64-1", path, text);
  }
  // Metadata and vocabulary through a metadata-only GGUF (removed once open: the reader keeps its mapping).
  char tmpl[] = "/tmp/ferry-random-XXXXXX";
  const int fd = mkstemp(tmpl);
  FERRY_CHECK(fd >= 0, "cannot create a temporary file for the random model's metadata in /tmp");
  close(fd);
  ModelFile file;
  try {
    write_random_model(tmpl, config, type, seed, 1, /*with_weights=*/false);
    file = open_model_metadata(tmpl);
  } catch (...) {
    unlink(tmpl);
    throw;
  }
  unlink(tmpl);
  file.path = path;
  std::vector<RandomTensor> tensors = random_model_tensors(config, type, seed, init);
  file.tensors.clear();
  for (const RandomTensor& t : tensors) {
    file.tensors.emplace_back(t.name, random_tensor_view(t, nullptr));
  }
  file.weights = std::make_unique<RandomWeightSource>(path, std::move(tensors), std::move(on_progress));
  file.gguf_names = true;
  check_config_against_tensors(file);
  return file;
}

ModelWeights load_random_shard(const ShardPlan& plan, const RandomWeightSource& source, bool gguf_names,
                               Backend& backend) {
  RandomShardSource shard(source, plan, backend.device() == Device::Cpu);
  ModelWeights w = load_weights(plan.local, shard, gguf_names, backend);
  shard.finish(w);
  return w;
}

}  // namespace ferry
