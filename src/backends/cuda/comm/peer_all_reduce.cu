// The one-shot peer-memory all-reduce (peer_all_reduce.h has the protocol).
#include "backends/cuda/comm/peer_all_reduce.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>

#include "backends/cuda/common/block_reduce.cuh"
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/sm90/pdl.cuh"

namespace ferry {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 128;  // <= the H200's 132 SMs: every block of a call can be resident at once
constexpr uint32_t kSentinel = 0x80000000u;  // -0.0f: a kLamport slot value no peer has written yet

// Every rank's buffer as mapped on this device. data[r]: [2][world][max_elems] f32; flags[r]:
// [2][world][kMaxBlocks] u32 (flag [set][q][b] is written by rank q's block b).
struct PeerPtrs {
  float* data[PeerAllReduce::kMaxWorld];
  uint32_t* flags[PeerAllReduce::kMaxWorld];
};

__device__ __forceinline__ void store_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// One element group of the sum: float4 or float.
template <typename T>
__device__ __forceinline__ T add(T a, T b);
template <>
__device__ __forceinline__ float add(float a, float b) { return a + b; }
template <>
__device__ __forceinline__ float4 add(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }

// kLamport's value canonicalization: -0.0 + 0.0 = +0.0 (round to nearest); every other value, NaN included,
// is unchanged. Applied to what a rank pushes and to its own term of the sum alike (same bits on every rank).
__device__ __forceinline__ float canon(float v) { return v + 0.0f; }
__device__ __forceinline__ float4 canon(float4 v) { return make_float4(v.x + 0.f, v.y + 0.f, v.z + 0.f, v.w + 0.f); }

__device__ __forceinline__ bool empty(float v) { return __float_as_uint(v) == kSentinel; }
__device__ __forceinline__ bool empty(float4 v) { return empty(v.x) || empty(v.y) || empty(v.z) || empty(v.w); }

// Stores to a peer's slot and polls of this rank's own slots: volatile (system-scope relaxed; never cached in L1).
__device__ __forceinline__ void st_volatile(float* p, float v) {
  asm volatile("st.volatile.global.f32 [%0], %1;" ::"l"(p), "f"(v) : "memory");
}
__device__ __forceinline__ void st_volatile(float4* p, float4 v) {
  asm volatile("st.volatile.global.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}
__device__ __forceinline__ float ld_volatile(const float* p) {
  float v;
  asm volatile("ld.volatile.global.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ float4 ld_volatile(const float4* p) {
  float4 v;
  asm volatile("ld.volatile.global.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p)
               : "memory");
  return v;
}
template <typename T>
__device__ __forceinline__ T sentinel();
template <>
__device__ __forceinline__ float sentinel() { return __uint_as_float(kSentinel); }
template <>
__device__ __forceinline__ float4 sentinel() {
  const float z = __uint_as_float(kSentinel);
  return make_float4(z, z, z, z);
}

// kLamport: a peer's value of this call from this rank's own slot, once every lane of it has landed; the slot is
// given the sentinel back (the same thread's later store: after its load).
template <typename T>
__device__ __forceinline__ T take(T* slot) {
  T v = ld_volatile(slot);
  while (empty(v)) v = ld_volatile(slot);
  *slot = sentinel<T>();
  return v;
}

// The phase log (PeerAllReduce::record_phases): thread 0 of block 0 keeps the global timer at each phase point
// in a register and writes them at the end, at row gen % kPhaseCalls (slot 7: kind).
enum Phase { kEntry, kReleased, kInputs, kPushed, kArrived, kDone, kPhases };
struct PhaseClock {
  unsigned long long t[kPhases];
  __device__ __forceinline__ void mark(const unsigned long long* log, Phase ph) {
    if (log != nullptr && blockIdx.x == 0 && threadIdx.x == 0) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t[ph]));
  }
  __device__ __forceinline__ void write(unsigned long long* log, uint32_t gen, unsigned long long kind) const {
    if (log == nullptr || blockIdx.x != 0 || threadIdx.x != 0) return;
    unsigned long long* row = log + size_t(gen % PeerAllReduce::kPhaseCalls) * 8;
    for (int i = 0; i < kPhases; ++i) row[i] = t[i];
    row[7] = kind;
  }
};

// Rank r's value of element group i under kFlags: this rank's own from x, a peer's from slot r of this rank's
// buffer (mine: [world][max_units] T of this call's set), read past L1 (__ldcg).
template <typename T>
__device__ __forceinline__ T r_value(int r, int rank, const T* x, const T* mine, int64_t max_units, int64_t i) {
  return r == rank ? x[i] : __ldcg(mine + int64_t(r) * max_units + i);
}

// The steps every kernel of a call takes (peer_all_reduce_kernel, peer_all_reduce_norm_kernel).
// begin_call: this call's generation (every block reads the counter before the last one advances it).
__device__ __forceinline__ uint32_t begin_call(const uint32_t* counter) {
  __shared__ uint32_t gen_s;
  if (threadIdx.x == 0) gen_s = *counter + 1;
  __syncthreads();
  return gen_s;
}

// kFlags, after the block's pushes into slot [set][rank] of every peer: thread q flags chunk b as landed in peer
// q's buffer, then waits for peer q's chunk b of this call in this rank's buffer.
__device__ __forceinline__ void signal_and_wait(const PeerPtrs& p, int rank, int world, int b, uint32_t gen) {
  const int set = int(gen & 1u);
  __syncthreads();  // the block's stores happen before thread q's fence and flag
  const int q = int(threadIdx.x);
  if (q < world && q != rank) {
    __threadfence_system();
    store_release_sys(p.flags[q] + (set * world + rank) * kMaxBlocks + b, gen);
    const uint32_t* flag = p.flags[rank] + (set * world + q) * kMaxBlocks + b;
    while (load_acquire_sys(flag) != gen) {
    }
  }
  __syncthreads();
}

// The last block to finish advances the call counter (every block has read it by then). One block (a batch-1
// decode step's row): it is the last, so no arrival count (an atomic's L2 round trip before the grid completes);
// the next call reads the counter only after its PDL wait, i.e. after this grid completed.
__device__ __forceinline__ void end_call(uint32_t* counter, uint32_t* done, uint32_t gen) {
  __shared__ bool last_s;
  if (gridDim.x == 1) {
    if (threadIdx.x == 0) *counter = gen;
    return;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    last_s = atomicAdd(done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (threadIdx.x == 0 && last_s) {
    *done = 0;
    *counter = gen;
  }
}

// x: [units] of T (float4 when n % 4 == 0 and x is 16-byte aligned, else float), this rank's input and output.
// p: every rank's buffer; counter/done: this rank's call counter and blocks-finished count (device memory).
// max_units: slot size in T. log: the phase log or null. Grid: blocks over units (<= kMaxBlocks), kThreads threads.
template <PeerProtocol kP, typename T>
__global__ void __launch_bounds__(kThreads) peer_all_reduce_kernel(T* __restrict__ x, int64_t units, const __grid_constant__ PeerPtrs p,
                                                                   uint32_t* counter, uint32_t* done, int rank,
                                                                   int world, int64_t max_units,
                                                                   unsigned long long* log) {
  // Launched with PDL: the next kernel (the norm, then the matvec whose producer streams weights) is placed
  // while this one waits on its peers. Everything, the call counter included, is read after pdl_wait().
  PhaseClock clk;
  clk.mark(log, kEntry);
  cuda_ops::pdl_allow_dependents();
  cuda_ops::pdl_wait();
  clk.mark(log, kReleased);
  const int b = int(blockIdx.x);
  const uint32_t gen = begin_call(counter);
  clk.mark(log, kInputs);
  const int set = int(gen & 1u);
  const int64_t per_block = (units + gridDim.x - 1) / gridDim.x;
  const int64_t lo = int64_t(b) * per_block;
  const int64_t hi = lo + per_block < units ? lo + per_block : units;
  T* mine = reinterpret_cast<T*>(p.data[rank]) + int64_t(set) * world * max_units;

  // Push this block's chunk into slot [set][rank] of every peer.
  for (int q = 0; q < world; ++q) {
    if (q == rank) continue;
    T* slot = reinterpret_cast<T*>(p.data[q]) + (int64_t(set) * world + rank) * max_units;
    for (int64_t i = lo + threadIdx.x; i < hi; i += kThreads) {
      if constexpr (kP == PeerProtocol::kLamport) {
        st_volatile(slot + i, canon(x[i]));
      } else {
        slot[i] = x[i];
      }
    }
  }
  clk.mark(log, kPushed);
  if constexpr (kP == PeerProtocol::kLamport) {
    // Sum in rank order (the same bits on every rank), each peer's value as it lands.
    for (int64_t i = lo + threadIdx.x; i < hi; i += kThreads) {
      const T own = canon(x[i]);
      T acc = rank == 0 ? own : take(mine + i);
      for (int r = 1; r < world; ++r) acc = add(acc, r == rank ? own : take(mine + int64_t(r) * max_units + i));
      x[i] = acc;
    }
    clk.mark(log, kArrived);
  } else {
    signal_and_wait(p, rank, world, b, gen);
    clk.mark(log, kArrived);
    // Sum in rank order (the same bits on every rank); peers' values from this rank's own buffer, past L1.
    for (int64_t i = lo + threadIdx.x; i < hi; i += kThreads) {
      T acc = r_value(0, rank, x, mine, max_units, i);
      for (int r = 1; r < world; ++r) acc = add(acc, r_value(r, rank, x, mine, max_units, i));
      x[i] = acc;
    }
  }
  clk.mark(log, kDone);
  end_call(counter, done, gen);
  clk.write(log, gen, 1);
}

// The all-reduce of delta fused with the residual add and RMSNorm that follow it (one launch instead of two, no
// round trip of the sum through a second kernel). Block b owns row b (rows <= kMaxBlocks): it pushes the row's
// delta into slot [set][rank] of every peer, waits for every peer's row b, sums in rank order (the same bits as
// peer_all_reduce_kernel on every rank), then residual += sum and out = residual * rsqrt(mean of squares + eps) *
// weight, fp32; delta is left holding the sum (as after all_reduce_sum). kV float4 per thread:
// cols <= kThreads * 4 * kV. The weight (constant) is requested before the PDL wait, the residual with delta right
// after it: their round trips overlap the wait and the peers' values instead of following them.
//   delta, residual, out: [rows, cols] f32 row-major (16-byte aligned, cols % 4 == 0); weight: [cols] f32.
// pushed (kLamport): the previous kernel stored delta into the peers' slots already (MatvecParams::peer_push).
template <PeerProtocol kP, int kV>
__global__ void __launch_bounds__(kThreads) peer_all_reduce_norm_kernel(float4* __restrict__ delta, float4* residual,
                                                                        float4* out, const float4* weight, int64_t vecs,
                                                                        float eps, const __grid_constant__ PeerPtrs p,
                                                                        uint32_t* counter, uint32_t* done, int rank,
                                                                        int world, int64_t max_units, bool pushed,
                                                                        unsigned long long* log) {
  PhaseClock clk;
  clk.mark(log, kEntry);
  cuda_ops::pdl_allow_dependents();
  const int b = int(blockIdx.x);
  const int64_t lo = int64_t(b) * vecs;
  float4 g[kV];
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    const int64_t j = threadIdx.x + int64_t(i) * kThreads;
    g[i] = j < vecs ? weight[j] : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  cuda_ops::pdl_wait();
  clk.mark(log, kReleased);
  float4 d[kV], res[kV];
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    const int64_t j = threadIdx.x + int64_t(i) * kThreads;
    d[i] = j < vecs ? delta[lo + j] : make_float4(0.f, 0.f, 0.f, 0.f);
    if constexpr (kP == PeerProtocol::kLamport) d[i] = canon(d[i]);
    res[i] = j < vecs ? residual[lo + j] : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  const uint32_t gen = begin_call(counter);
  clk.mark(log, kInputs);
  const int set = int(gen & 1u);
  for (int q = 0; q < world && !pushed; ++q) {
    if (q == rank) continue;
    float4* slot = reinterpret_cast<float4*>(p.data[q]) + (int64_t(set) * world + rank) * max_units + lo;
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      const int64_t j = threadIdx.x + int64_t(i) * kThreads;
      if (j >= vecs) continue;
      if constexpr (kP == PeerProtocol::kLamport) {
        st_volatile(slot + j, d[i]);
      } else {
        slot[j] = d[i];
      }
    }
  }
  clk.mark(log, kPushed);
  if constexpr (kP == PeerProtocol::kFlags) signal_and_wait(p, rank, world, b, gen);
  float4* mine = reinterpret_cast<float4*>(p.data[rank]) + int64_t(set) * world * max_units + lo;
  // The sum in rank order, one rank's kV terms at a time. A peer's terms are requested together (kLamport: polled
  // together until none is the sentinel, then given it back), so a peer costs one L2 round trip, not kV in a row
  // (polling them one by one held most of a call: docs/perf-log.md, 2026-11-30's phase log).
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
  float4 acc[kV];
  for (int r = 0; r < world; ++r) {
    float4 t[kV];
    float4* src = mine + int64_t(r) * max_units;
    if (r == rank) {
#pragma unroll
      for (int i = 0; i < kV; ++i) t[i] = d[i];
    } else if constexpr (kP == PeerProtocol::kLamport) {
#pragma unroll
      for (int i = 0; i < kV; ++i) {
        const int64_t j = threadIdx.x + int64_t(i) * kThreads;
        t[i] = j < vecs ? ld_volatile(src + j) : zero;
      }
      for (bool landed = false; !landed;) {
        landed = true;
#pragma unroll
        for (int i = 0; i < kV; ++i) {
          const int64_t j = threadIdx.x + int64_t(i) * kThreads;
          if (j < vecs && empty(t[i])) {
            t[i] = ld_volatile(src + j);
            landed = false;
          }
        }
      }
#pragma unroll
      for (int i = 0; i < kV; ++i) {
        const int64_t j = threadIdx.x + int64_t(i) * kThreads;
        if (j < vecs) src[j] = sentinel<float4>();  // after this thread's loads of it: for the call two later
      }
    } else {
#pragma unroll
      for (int i = 0; i < kV; ++i) {
        const int64_t j = threadIdx.x + int64_t(i) * kThreads;
        t[i] = j < vecs ? __ldcg(src + j) : zero;
      }
    }
#pragma unroll
    for (int i = 0; i < kV; ++i) acc[i] = r == 0 ? t[i] : add(acc[i], t[i]);
  }
  float ss = 0.0f;
  float4 v[kV];
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    const int64_t j = threadIdx.x + int64_t(i) * kThreads;
    if (j >= vecs) {
      v[i] = zero;
      continue;
    }
    delta[lo + j] = acc[i];
    v[i] = add(res[i], acc[i]);
    residual[lo + j] = v[i];
    ss = fmaf(v[i].x, v[i].x, ss);
    ss = fmaf(v[i].y, v[i].y, ss);
    ss = fmaf(v[i].z, v[i].z, ss);
    ss = fmaf(v[i].w, v[i].w, ss);
  }
  clk.mark(log, kArrived);
  const float scale = 1.0f / sqrtf(cuda_ops::block_sum<kThreads>(ss) / float(vecs * 4) + eps);
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    const int64_t j = threadIdx.x + int64_t(i) * kThreads;
    if (j >= vecs) continue;
    out[lo + j] = make_float4(v[i].x * scale * g[i].x, v[i].y * scale * g[i].y, v[i].z * scale * g[i].z,
                              v[i].w * scale * g[i].w);
  }
  clk.mark(log, kDone);
  end_call(counter, done, gen);
  clk.write(log, gen, 2);
}

// Fills n words with v (the kLamport data's sentinel at construction).
__global__ void fill_words_kernel(uint32_t* p, size_t n, uint32_t v) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) p[i] = v;
}

size_t data_bytes(int world, size_t max_elems) { return 2 * size_t(world) * max_elems * sizeof(float); }
size_t flag_count(int world) { return 2 * size_t(world) * kMaxBlocks; }
size_t buffer_bytes(int world, size_t max_elems) {
  return data_bytes(world, max_elems) + (flag_count(world) + 2) * sizeof(uint32_t);
}
uint32_t* flags_of(void* buffer, int world, size_t max_elems) {
  return reinterpret_cast<uint32_t*>(static_cast<char*>(buffer) + data_bytes(world, max_elems));
}

}  // namespace

PeerAllReduce::PeerAllReduce(int rank, int world, size_t max_bytes, PeerProtocol protocol)
    : rank_(rank), world_(world), protocol_(protocol), max_elems_((max_bytes / 16) * 4) {
  FERRY_CUDA_REQUIRE(world >= 2 && world <= kMaxWorld && rank >= 0 && rank < world && max_elems_ > 0);
  FERRY_CUDA_CHECK(cudaGetDevice(&device_));
  const size_t bytes = buffer_bytes(world, max_elems_);
  FERRY_CUDA_CHECK(cudaMalloc(&buffer_, bytes));
  // Flags, counter and done count start at zero (the first call's gen is 1). kLamport: every data slot holds
  // the sentinel; kFlags: the data needs no initial value.
  FERRY_CUDA_CHECK(cudaMemset(flags_of(buffer_, world, max_elems_), 0, (flag_count(world) + 2) * sizeof(uint32_t)));
  if (protocol_ == PeerProtocol::kLamport) {
    fill_words_kernel<<<256, 256>>>(static_cast<uint32_t*>(buffer_), data_bytes(world, max_elems_) / 4, kSentinel);
    FERRY_CUDA_CHECK_LAUNCH(fill_words_kernel);
  }
  FERRY_CUDA_CHECK(cudaDeviceSynchronize());
  peers_.assign(size_t(world), nullptr);
  peers_[size_t(rank)] = buffer_;
}

PeerAllReduce::~PeerAllReduce() {
  int prev = 0;
  cudaGetDevice(&prev);
  cudaSetDevice(device_);
  if (phases_ != nullptr) {
    const std::string report = phase_report();
    std::fputs(report.c_str(), stderr);
    cudaFree(phases_);
  }
  for (void* p : opened_) cudaIpcCloseMemHandle(p);
  cudaFree(buffer_);
  cudaSetDevice(prev);
}

void PeerAllReduce::record_phases() {
  if (phases_ != nullptr) return;
  const size_t bytes = size_t(kPhaseCalls) * 8 * sizeof(unsigned long long);
  FERRY_CUDA_CHECK(cudaMalloc(&phases_, bytes));
  FERRY_CUDA_CHECK(cudaMemset(phases_, 0, bytes));
  FERRY_CUDA_CHECK(cudaDeviceSynchronize());
}

std::string PeerAllReduce::phase_report() const {
  if (phases_ == nullptr) return {};
  // (host code of a .cu file: nvcc does not take fmt's compile-time format strings, so snprintf)
  const auto append = [](std::string& out, const char* format, auto... args) {
    char line[160];
    std::snprintf(line, sizeof(line), format, args...);
    out += line;
  };
  std::string out;
  std::vector<unsigned long long> t(size_t(kPhaseCalls) * 8);
  if (cudaDeviceSynchronize() != cudaSuccess ||
      cudaMemcpy(t.data(), phases_, t.size() * sizeof(t[0]), cudaMemcpyDeviceToHost) != cudaSuccess) {
    append(out, "peer all-reduce rank %d: could not read the phase log back\n", rank_);
    return out;
  }
  static constexpr const char* kNames[] = {"released", "inputs", "pushed", "arrived", "done"};
  for (unsigned long long kind : {1ull, 2ull}) {
    std::vector<std::vector<double>> d(std::size(kNames));  // per phase: us after the phase before it
    std::vector<double> total;                               // us from the wait's release to done
    for (int c = 0; c < kPhaseCalls; ++c) {
      const unsigned long long* row = t.data() + size_t(c) * 8;
      if (row[7] != kind) continue;
      for (size_t k = 0; k < std::size(kNames); ++k) d[k].push_back(double(row[k + 1] - row[k]) / 1e3);
      total.push_back(double(row[kDone] - row[kReleased]) / 1e3);
    }
    if (total.empty()) continue;
    const auto quantile = [](std::vector<double> v, double q) {
      std::sort(v.begin(), v.end());
      return v[size_t(q * double(v.size() - 1))];
    };
    append(out, "peer all-reduce rank %d (%s, %s) over %zu calls, us, median [p90]:", rank_,
           protocol_ == PeerProtocol::kLamport ? "lamport" : "flags", kind == 1 ? "plain" : "+norm", total.size());
    for (size_t k = 0; k < std::size(kNames); ++k)
      append(out, " %s %.2f [%.2f]", kNames[k], quantile(d[k], 0.5), quantile(d[k], 0.9));
    append(out, "; released->done %.2f [%.2f]\n", quantile(total, 0.5), quantile(total, 0.9));
  }
  return out;
}

std::vector<uint8_t> PeerAllReduce::ipc_handle() const {
  cudaIpcMemHandle_t h;
  FERRY_CUDA_CHECK(cudaIpcGetMemHandle(&h, buffer_));
  std::vector<uint8_t> bytes(sizeof(h));
  std::memcpy(bytes.data(), &h, sizeof(h));
  return bytes;
}

void PeerAllReduce::open_ipc(const std::vector<std::vector<uint8_t>>& handles) {
  FERRY_CUDA_REQUIRE(!connected_ && handles.size() == size_t(world_));
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    FERRY_CUDA_REQUIRE(handles[size_t(r)].size() == sizeof(cudaIpcMemHandle_t));
    cudaIpcMemHandle_t h;
    std::memcpy(&h, handles[size_t(r)].data(), sizeof(h));
    void* p = nullptr;
    FERRY_CUDA_CHECK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
    opened_.push_back(p);
    peers_[size_t(r)] = p;
  }
  connected_ = true;
}

void PeerAllReduce::connect_local(const std::vector<PeerAllReduce*>& ranks) {
  FERRY_CUDA_REQUIRE(!connected_ && ranks.size() == size_t(world_));
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    const int peer_device = ranks[size_t(r)]->device_;
    if (peer_device != device_) {
      int can = 0;
      FERRY_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device_, peer_device));
      FERRY_CUDA_REQUIRE(can == 1);
      const cudaError_t e = cudaDeviceEnablePeerAccess(peer_device, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();
      } else {
        FERRY_CUDA_CHECK(e);
      }
    }
    peers_[size_t(r)] = ranks[size_t(r)]->buffer_;
  }
  connected_ = true;
}

namespace {

PeerPtrs peer_ptrs(const std::vector<void*>& peers, int world, size_t max_elems) {
  PeerPtrs p{};
  for (int r = 0; r < world; ++r) {
    p.data[r] = static_cast<float*>(peers[size_t(r)]);
    p.flags[r] = flags_of(peers[size_t(r)], world, max_elems);
  }
  return p;
}

}  // namespace

bool PeerAllReduce::fits_add_rms_norm(int64_t rows, int64_t cols) const {
  return rows >= 1 && rows <= kMaxBlocks && cols >= 4 && cols % 4 == 0 && cols <= kNormMaxCols &&
         fits(size_t(rows * cols));
}

PeerAllReduce::PushTarget PeerAllReduce::push_target() const {
  FERRY_CUDA_REQUIRE(connected_ && protocol_ == PeerProtocol::kLamport);
  PushTarget t;
  for (int q = 0; q < world_; ++q)
    if (q != rank_) t.slot[q] = static_cast<float*>(peers_[size_t(q)]) + size_t(rank_) * max_elems_;
  t.set_stride = int64_t(world_) * int64_t(max_elems_);
  t.counter = flags_of(buffer_, world_, max_elems_) + flag_count(world_);
  return t;
}

void PeerAllReduce::run_add_rms_norm(float* delta, float* residual, float* out, const float* weight, int64_t rows,
                                     int64_t cols, float eps, CUstream_st* stream, bool pushed) {
  FERRY_CUDA_REQUIRE(connected_ && fits_add_rms_norm(rows, cols) && (!pushed || protocol_ == PeerProtocol::kLamport));
  const auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  FERRY_CUDA_REQUIRE(aligned(delta) && aligned(residual) && aligned(out) && aligned(weight));
  const PeerPtrs p = peer_ptrs(peers_, world_, max_elems_);
  uint32_t* counter = flags_of(buffer_, world_, max_elems_) + flag_count(world_);
  const int64_t vecs = cols / 4, max_units = int64_t(max_elems_ / 4);
  auto* log = static_cast<unsigned long long*>(phases_);
  const auto go = [&]<PeerProtocol kP, int kV>() {
    cuda_ops::launch_pdl(peer_all_reduce_norm_kernel<kP, kV>, dim3(unsigned(rows)), dim3(kThreads), 0, stream,
                         reinterpret_cast<float4*>(delta), reinterpret_cast<float4*>(residual),
                         reinterpret_cast<float4*>(out), reinterpret_cast<const float4*>(weight), vecs, eps, p, counter,
                         counter + 1, rank_, world_, max_units, pushed, log);
  };
  const auto by_width = [&]<PeerProtocol kP>() {
    if (vecs <= kThreads) go.template operator()<kP, 1>();
    else if (vecs <= 2 * kThreads) go.template operator()<kP, 2>();
    else if (vecs <= 4 * kThreads) go.template operator()<kP, 4>();
    else go.template operator()<kP, 8>();
  };
  if (protocol_ == PeerProtocol::kLamport) by_width.template operator()<PeerProtocol::kLamport>();
  else by_width.template operator()<PeerProtocol::kFlags>();
  FERRY_CUDA_CHECK_LAUNCH(peer_all_reduce_norm_kernel);
}

void PeerAllReduce::run(float* x, size_t n, CUstream_st* stream) {
  FERRY_CUDA_REQUIRE(connected_ && fits(n));
  const PeerPtrs p = peer_ptrs(peers_, world_, max_elems_);
  uint32_t* counter = flags_of(buffer_, world_, max_elems_) + flag_count(world_);
  const bool vec = n % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const int64_t units = vec ? int64_t(n / 4) : int64_t(n);
  const int64_t max_units = vec ? int64_t(max_elems_ / 4) : int64_t(max_elems_);
  const int blocks = int(std::min<int64_t>(kMaxBlocks, (units + kThreads - 1) / kThreads));
  auto* log = static_cast<unsigned long long*>(phases_);
  const auto go = [&]<PeerProtocol kP>() {
    if (vec) {
      cuda_ops::launch_pdl(peer_all_reduce_kernel<kP, float4>, dim3(unsigned(blocks)), dim3(kThreads), 0, stream,
                           reinterpret_cast<float4*>(x), units, p, counter, counter + 1, rank_, world_, max_units, log);
    } else {
      cuda_ops::launch_pdl(peer_all_reduce_kernel<kP, float>, dim3(unsigned(blocks)), dim3(kThreads), 0, stream, x,
                           units, p, counter, counter + 1, rank_, world_, max_units, log);
    }
  };
  if (protocol_ == PeerProtocol::kLamport) go.template operator()<PeerProtocol::kLamport>();
  else go.template operator()<PeerProtocol::kFlags>();
  FERRY_CUDA_CHECK_LAUNCH(peer_all_reduce_kernel);
}

}  // namespace ferry
