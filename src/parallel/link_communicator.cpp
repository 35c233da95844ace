#include "parallel/link_communicator.h"

#include <cstring>

#include "core/check.h"

namespace ferry {
namespace {

// x: contiguous f32 tensor on the CPU -> its bytes, (numel * 4).
std::vector<uint8_t> bytes_of(const float* x, size_t n) {
  std::vector<uint8_t> b(n * sizeof(float));
  std::memcpy(b.data(), x, b.size());
  return b;
}

}  // namespace

LinkCommunicator::LinkCommunicator(const LinkCommunicatorOptions& o) : link_(o.link), timeout_(o.timeout) {
  FERRY_ASSERT(link_ != nullptr);
}

template <class Fn>
void LinkCommunicator::guarded(Fn&& fn) {
  if (failed_) throw Error(failure_);
  try {
    fn();
  } catch (const std::exception& e) {
    abort(e.what());
    throw Error(failure_);
  }
}

void LinkCommunicator::all_reduce_sum(const Tensor& x) {
  FERRY_ASSERT(x.dtype == DType::F32 && x.device == Device::Cpu);
  const size_t n = size_t(x.numel());  // the same on every rank
  if (n == 0) return;
  float* data = x.ptr<float>();  // (n) f32, contiguous
  guarded([&] {
    const auto parts = link_->gather(bytes_of(data, n), timeout_);
    std::vector<uint8_t> sum;
    if (rank() == 0) {
      for (size_t r = 1; r < parts.size(); ++r)
        FERRY_CHECK(parts[r].size() == n * 4, "rank {} sent {} bytes to an all-reduce of {} floats", r,
                    parts[r].size(), n);
      // Rank order 0..N-1, rank 0's values first: every rank gets these bits.
      for (size_t r = 1; r < parts.size(); ++r) {
        const auto* src = reinterpret_cast<const float*>(parts[r].data());
        for (size_t i = 0; i < n; ++i) data[i] += src[i];
      }
      sum = bytes_of(data, n);
    }
    link_->broadcast_within(sum, timeout_);
    if (rank() != 0) {
      FERRY_CHECK(sum.size() == n * 4, "rank 0 sent {} bytes for an all-reduce of {} floats", sum.size(), n);
      std::memcpy(data, sum.data(), sum.size());
    }
  });
}

void LinkCommunicator::all_gather_inplace(const Tensor& buf) {
  FERRY_ASSERT(buf.dtype == DType::F32 && buf.device == Device::Cpu && buf.numel() % world() == 0);
  const size_t part = size_t(buf.numel()) / size_t(world());  // floats per rank
  if (part == 0) return;
  float* data = buf.ptr<float>();  // (world * part) f32; this rank filled [rank * part, (rank + 1) * part)
  guarded([&] {
    const auto parts = link_->gather(bytes_of(data + part * size_t(rank()), part), timeout_);
    std::vector<uint8_t> all;
    if (rank() == 0) {
      for (size_t r = 1; r < parts.size(); ++r) {
        FERRY_CHECK(parts[r].size() == part * 4, "rank {} sent {} bytes to an all-gather of {} floats per rank", r,
                    parts[r].size(), part);
        std::memcpy(data + part * r, parts[r].data(), parts[r].size());
      }
      all = bytes_of(data, part * size_t(world()));
    }
    link_->broadcast_within(all, timeout_);
    if (rank() != 0) {
      FERRY_CHECK(all.size() == part * size_t(world()) * 4, "rank 0 sent {} bytes for an all-gather of {} floats",
                  all.size(), part * size_t(world()));
      std::memcpy(data, all.data(), all.size());
    }
  });
}

void LinkCommunicator::broadcast(std::vector<uint8_t>& bytes) {
  guarded([&] { link_->broadcast(bytes); });  // followers wait for the next step without a timeout
}

void LinkCommunicator::barrier() {
  guarded([&] {
    link_->gather({}, timeout_);
    std::vector<uint8_t> go(1, 1);  // not empty: an empty broadcast is the stop message
    link_->broadcast_within(go, timeout_);
  });
}

void LinkCommunicator::abort(const std::string& why) noexcept {
  if (failed_) return;
  failed_ = true;
  try {
    failure_ = why.rfind("tensor-parallel rank", 0) == 0 ? why : fmt::format("tensor-parallel rank {} failed: {}", rank(), why);
  } catch (...) {
  }
  link_->send_abort(failure_);
}

}  // namespace ferry
