#include "backends/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <map>
#include <vector>

#include "backends/cuda/attention/qkv_epilogue.cuh"
#include "backends/cuda/common/device_errors.h"
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/cuda_backend_views.h"
#include "backends/cuda/diag/op_profiler.h"
#include "backends/cuda/diag/stamp_table.h"
#include "backends/cuda/elementwise/elementwise.cuh"
#include "backends/cuda/elementwise/embedding.cuh"
#include "backends/cuda/elementwise/norm.cuh"
#include "backends/cuda/matmul/dequant.cuh"
#include "backends/cuda/matmul/gemm_cublaslt.h"
#include "backends/cuda/matmul/gemm_sm90.cuh"
#include "backends/cuda/matmul/matvec.cuh"
#include "backends/cuda/matmul/plan.h"
#include "backends/cuda/matmul/skinny_mma.cuh"
#include "backends/cuda/matmul/skinny_wgmma.cuh"
#include "backends/cuda/matmul/stream_half.cuh"
#include "backends/cuda/matmul/stream_quant.cuh"
#include "backends/cuda/matmul/weight_layout.cuh"
#include "backends/cuda/matmul/weight_repack.h"
#include "backends/cuda/sampling/sampling.cuh"
#include "backends/cuda/sampling/token_feedback.cuh"
#include "backends/cuda/sampling/token_mask.cuh"
#include "backends/cuda/step_graph.h"
#include "core/check.h"
#include "formats/quant.h"

namespace ferry {

using namespace cuda_ops;

void require_cuda(const Tensor& t, const char* what) {
  FERRY_CHECK(t.device == Device::Cuda, "CUDA backend: {} is not in device memory", what);
}

WeightView weight_view(const Tensor& w) {
  return WeightView{static_cast<const uint8_t*>(w.data), w.rows(), w.cols(),
                    is_split_type(w.dtype) ? scales_offset(w.dtype, w.rows(), w.cols()) : 0};
}

namespace {

constexpr size_t kGemmWorkspaceBytes = size_t(32) << 20;  // cuBLASLt's recommendation for Hopper
constexpr size_t kUploadBatchBytes = size_t(64) << 20;    // host staging per prepare_weight batch

// Values per decoding chunk of a native type (cols must be a multiple).
int64_t chunk_vals(DType t) {
  int64_t vals = 0;
  visit_decoder(t, [&]<class D>() { vals = D::kVals; });
  return vals;
}

// The optional bf16 copy of a prepared weight (CudaBackendOptions::prefill_bf16_weights) lives in the same
// buffer, after the prepared layout, 256-byte aligned: (rows, cols) bf16 row-major at data + this offset.
// Not for BF16 (already bf16) nor F32 (also what non-native types become on upload).
bool has_bf16_copy(const CudaBackendOptions& o, DType t) {
  return o.prefill_bf16_weights && t != DType::BF16 && t != DType::F32;
}
size_t bf16_copy_offset(DType t, int64_t rows, int64_t cols) { return (prepared_bytes(t, rows, cols) + 255) / 256 * 256; }

}  // namespace

float* f32_or_null(const Tensor& t) { return t.empty() ? nullptr : t.ptr<float>(); }

int64_t token_bucket(int64_t n) {
  if (n <= 16) return n;
  int64_t p = 32;
  while (p < n) p *= 2;
  return p;
}

int CudaBackend::device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

CudaBackend::CudaBackend(const CudaBackendOptions& options) : options_(options) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail("no CUDA device: {} ({})", cudaGetErrorString(e), cudaGetErrorName(e));
  }
  FERRY_CHECK(n > 0, "no CUDA device: the driver reports none");
  FERRY_CHECK(options.device_index >= 0 && options.device_index < n, "CUDA device {} does not exist ({} present)",
              options.device_index, n);
  FERRY_CUDA_CHECK(cudaSetDevice(options.device_index));
  cudaDeviceProp prop{};
  FERRY_CUDA_CHECK(cudaGetDeviceProperties(&prop, options.device_index));
  device_name_ = prop.name;
  n_sms_ = prop.multiProcessorCount;
  max_smem_ = prop.sharedMemPerBlockOptin;
  cudaStream_t s = nullptr;
  FERRY_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_ = s;
  void* host_errors = nullptr;
  FERRY_CUDA_CHECK(cudaHostAlloc(&host_errors, sizeof(DeviceErrors), cudaHostAllocMapped));
  errors_ = static_cast<DeviceErrors*>(host_errors);  // with unified addressing, usable on the device as is
  *errors_ = DeviceErrors{0, 0};
  gemm_ = std::make_unique<CublasLtGemm>();
  const bool ferry_gemms = options.tune.gemm != GemmTune::kCublas;
  if (ferry_gemms || options.batch_invariant) {
    auto hopper = std::make_unique<Sm90Gemm>(options.device_index, options.tune.gemm == GemmTune::kFerryPdl);
    if (hopper->available()) sm90_gemm_ = std::move(hopper);
  }
  if (ferry_gemms) {
    auto wg = std::make_unique<cuda_ops::WgSkinnyGemm>(options.device_index);
    if (wg->available()) wg_skinny_ = std::move(wg);
  }
  if (options.batch_invariant) {
    FERRY_CHECK(sm90_gemm_ != nullptr, "batch-invariant mode needs ferry's Hopper GEMM (compute capability 9.x); "
                "device {} ({}) is {}.{}", options.device_index, device_name_, prop.major, prop.minor);
    options_.prefill_bf16_weights = true;  // one GEMM for every token count reads bf16 weights
  }
  if (options.profile_ops) profiler_ = std::make_unique<OpProfiler>(stream_);
  if (options.phase_stamps) {
    DeviceBuffer words = alloc(size_t(cuda_ops::StampTable::kMaxKinds) * cuda_ops::kStampSlots * 8);
    FERRY_CUDA_CHECK(cudaMemset(words.data(), 0, words.bytes()));
    stamps_ = std::make_unique<cuda_ops::StampTable>(std::move(words));
  }
  cudaEvent_t copy_event = nullptr;
  FERRY_CUDA_CHECK(cudaEventCreateWithFlags(&copy_event, cudaEventDisableTiming));
  copy_done_ = copy_event;
  for (CUevent_st*& e : marks_) {
    cudaEvent_t ev = nullptr;
    FERRY_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    e = ev;
  }
}

CudaBackend::~CudaBackend() {
  // Errors are ignored here: a destructor must not throw, and the process may be going down anyway.
  cancel_capture();
  if (stream_) cudaStreamSynchronize(stream_);
  if (profiler_) {
    const std::string table = profiler_->report();
    if (!table.empty()) std::fprintf(stderr, "%s", table.c_str());
    profiler_.reset();
  }
  if (stamps_) {
    const std::string table = stamps_->report();
    if (!table.empty()) std::fprintf(stderr, "%s", table.c_str());
    stamps_.reset();
  }
  gemm_.reset();
  if (errors_) cudaFreeHost(errors_);
  if (copy_done_) cudaEventDestroy(copy_done_);
  for (CUevent_st* e : marks_)
    if (e) cudaEventDestroy(e);
  for (SampleStaging& slot : sample_staging_)
    if (slot.copied) cudaEventDestroy(slot.copied);
  if (stream_) cudaStreamDestroy(stream_);
}

std::string CudaBackend::name() const { return "cuda"; }

std::vector<std::pair<std::string, std::string>> CudaBackend::facts() const {
  std::vector<std::pair<std::string, std::string>> f;
  f.emplace_back("cuda.weight_bytes", std::to_string(weight_bytes_));
  if (widened_bytes_ > 0) f.emplace_back("cuda.widened_weights", fmt::format("{} bytes dequantized to f32", widened_bytes_));
  f.emplace_back("cuda.prefill_weights",
                 copy_bytes_ > 0 ? fmt::format("bf16 copies of the quantized weights ({} bytes)", copy_bytes_)
                                 : std::string("the weights as prepared (quantized ones dequantized per GEMM)"));
  if (!stacks_.empty()) {
    // How many projections stack row ranges of different types, by pair, and how many of them the one-token plan
    // streams in one launch with the norm in its prologue (the decode q|k|v path of a Q4_K_M layer).
    std::map<std::string, int> pairs;
    int fused = 0;
    for (const auto& [data, s] : stacks_) {
      ++pairs[fmt::format("{}+{}", dtype_name(s.head.dtype), dtype_name(s.tail.dtype))];
      const Tensor w = Tensor::make(DType::Stacked, {s.head.rows() + s.tail.rows(), s.head.cols()},
                                    const_cast<void*>(data), Device::Cuda);
      const cuda_ops::MatmulPlan p = plan(1, w);
      fused += p.matvec == cuda_ops::MatvecKernel::kStreamQuant && p.kernel == cuda_ops::MatmulKernel::kMatvec && p.in_norm;
    }
    std::string by_pair;
    for (const auto& [pair, count] : pairs) by_pair += fmt::format("{}{} {}", by_pair.empty() ? "" : ", ", count, pair);
    f.emplace_back("cuda.stacked_weights",
                   fmt::format("{} ({}); one token: {} stream_quant_stacked with the norm prologue", stacks_.size(),
                               by_pair, fused));
  }
  return f;
}

DeviceBuffer CudaBackend::alloc(size_t bytes) {
  const size_t rounded = std::max<size_t>(256, (bytes + 255) / 256 * 256);
  FERRY_CHECK(rounded >= bytes, "CUDA allocation of {} bytes overflows", bytes);
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, rounded);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    (void)cudaMemGetInfo(&free_bytes, &total_bytes);
    fail("CUDA out of memory on device {} ({}): asked for {:.1f} MiB ({} bytes), {:.1f} MiB free of {:.1f} MiB",
         options_.device_index, device_name_, double(bytes) / (1 << 20), bytes, double(free_bytes) / (1 << 20),
         double(total_bytes) / (1 << 20));
  }
  FERRY_CUDA_CHECK(e);
  return DeviceBuffer(p, bytes, Device::Cuda, [](void* q) { (void)cudaFree(q); });
}

Tensor CudaBackend::prepare_weight(const Tensor& host, std::vector<DeviceBuffer>& keep) {
  return upload_weight(host, keep, has_bf16_copy(options_, host.dtype));
}

Tensor CudaBackend::prepare_stacked_weight(std::span<const Tensor> runs, std::vector<DeviceBuffer>& keep) {
  if (runs.size() != 2 || runs[0].dtype == runs[1].dtype || runs[0].cols() != runs[1].cols()) return Tensor{};
  for (const Tensor& r : runs) FERRY_ASSERT(r.device == Device::Cpu && r.n_dims == 2);
  const int64_t head_rows = runs[0].rows(), tail_rows = runs[1].rows(), rows = head_rows + tail_rows;
  const int64_t cols = runs[0].cols();
  // The plan decides: a stack only where its one-token matmul is the one stacked launch.
  if (!cuda_ops::stack_worth_it({.wtype = runs[0].dtype, .rows = rows, .cols = cols, .n = 1, .tail_rows = tail_rows,
                                 .tail_type = runs[1].dtype},
                                {.bf16_weight = has_bf16_copy(options_, DType::Stacked),
                                 .sm90_gemm = sm90_gemm_ != nullptr,
                                 .skinny_wgmma = wg_skinny_ != nullptr,
                                 .batch_invariant = options_.batch_invariant,
                                 .tune = options_.tune,
                                 .n_sms = n_sms_,
                                 .max_smem = max_smem_}))
    return Tensor{};
  StackedWeight s{.head = upload_weight(runs[0], keep, false), .tail = upload_weight(runs[1], keep, false)};
  if (has_bf16_copy(options_, DType::Stacked)) {
    DeviceBuffer copy = alloc(size_t(rows) * size_t(cols) * 2);  // (rows, cols) bf16: the head's rows, the tail's
    auto* b = static_cast<uint16_t*>(copy.data());
    dequantize_to_bf16(s.head.dtype, weight_view(s.head), b, stream_);
    dequantize_to_bf16(s.tail.dtype, weight_view(s.tail), b + size_t(head_rows) * size_t(cols), stream_);
    s.bf16 = b;
    copy_bytes_ += copy.bytes();
    keep.push_back(std::move(copy));
  }
  const Tensor stack = Tensor::make(DType::Stacked, {rows, cols}, s.head.data, Device::Cuda);
  stacks_.emplace(stack.data, s);
  return stack;
}

const CudaBackend::StackedWeight& CudaBackend::stacked(const Tensor& w) const {
  const auto it = stacks_.find(w.data);
  FERRY_CHECK(w.dtype == DType::Stacked && it != stacks_.end() && it->second.head.rows() + it->second.tail.rows() ==
                                                                      w.rows(),
              "CUDA backend: a stacked weight it did not prepare (shape {})", w.shape_str());
  return it->second;
}

size_t CudaBackend::weight_nbytes(const Tensor& w) const {
  if (w.dtype != DType::Stacked) return w.nbytes();
  const StackedWeight& s = stacked(w);
  return cuda_ops::prepared_bytes(s.head.dtype, s.head.rows(), s.head.cols()) +
         cuda_ops::prepared_bytes(s.tail.dtype, s.tail.rows(), s.tail.cols());
}

void CudaBackend::stacked_matvec(const Tensor& w, cuda_ops::MatvecParams p) {
  const StackedWeight& s = stacked(w);
  p.w = weight_view(s.head);
  p.stream = weight_stream(s.head.dtype);
  p.kernel = cuda_ops::MatvecKernel::kStreamQuant;
  cuda_ops::stream_quant_stacked(s.head.dtype, s.tail.dtype, p, weight_view(s.tail), stream_);
}

Tensor CudaBackend::upload_weight(const Tensor& host, std::vector<DeviceBuffer>& keep, bool bf16_copy) {
  FERRY_ASSERT(host.device == Device::Cpu);
  const int64_t rows = host.rows(), cols = host.cols();
  FERRY_CHECK(rows > 0 && cols > 0, "CUDA backend: empty weight of shape {}", host.shape_str());
  Tensor dev = host;
  dev.device = Device::Cuda;
  cudaStream_t s = stream_;

  if (!is_native_weight_type(host.dtype)) {
    // Dequantized to F32 on the host (exact), a batch of rows at a time.
    FERRY_CHECK(cols % 4 == 0, "CUDA backend: weight of shape {} ({}) needs a multiple of 4 columns",
                host.shape_str(), dtype_name(host.dtype));
    DeviceBuffer buf = alloc(size_t(rows) * size_t(cols) * 4);
    const int64_t batch = std::max<int64_t>(1, int64_t(kUploadBatchBytes / (size_t(cols) * 4)));
    std::vector<float> staging;
    for (int64_t r0 = 0; r0 < rows; r0 += batch) {
      const int64_t count = std::min(batch, rows - r0);
      staging.resize(size_t(count) * size_t(cols));
      for (int64_t r = 0; r < count; ++r) dequantize_row(host.dtype, host.row(r0 + r), staging.data() + r * cols, cols);
      // Pageable source: the call returns once the bytes are staged, so `staging` may be reused at once.
      FERRY_CUDA_CHECK(cudaMemcpyAsync(static_cast<float*>(buf.data()) + r0 * cols, staging.data(),
                                       staging.size() * 4, cudaMemcpyHostToDevice, s));
    }
    dev.dtype = DType::F32;
    dev.data = buf.data();
    weight_bytes_ += buf.bytes();
    widened_bytes_ += buf.bytes();
    keep.push_back(std::move(buf));
    return dev;
  }

  FERRY_CHECK(cols % chunk_vals(host.dtype) == 0,
              "CUDA backend: a {} weight needs a multiple of {} columns (shape {})", dtype_name(host.dtype),
              chunk_vals(host.dtype), host.shape_str());
  const size_t copy_at = bf16_copy_offset(host.dtype, rows, cols);
  DeviceBuffer buf = alloc(bf16_copy ? copy_at + size_t(rows) * size_t(cols) * 2 : prepared_bytes(host.dtype, rows, cols));
  auto* base = static_cast<uint8_t*>(buf.data());
  if (is_split_type(host.dtype)) {
    const size_t nb = size_t(cols / split_block_vals(host.dtype));
    const size_t qrow = nb * size_t(split_qbytes(host.dtype)), srow = nb * size_t(split_sbytes(host.dtype));
    const size_t soff = scales_offset(host.dtype, rows, cols);
    const int64_t batch = std::max<int64_t>(1, int64_t(kUploadBatchBytes / host.row_bytes()));
    std::vector<uint8_t> quants, scales;
    for (int64_t r0 = 0; r0 < rows; r0 += batch) {
      const int64_t count = std::min(batch, rows - r0);
      split_blocks(host.dtype, host.row<uint8_t>(r0), count, cols, quants, scales);
      FERRY_CUDA_CHECK(cudaMemcpyAsync(base + size_t(r0) * qrow, quants.data(), quants.size(), cudaMemcpyHostToDevice, s));
      FERRY_CUDA_CHECK(cudaMemcpyAsync(base + soff + size_t(r0) * srow, scales.data(), scales.size(),
                                       cudaMemcpyHostToDevice, s));
    }
  } else {  // F32, F16, BF16, Q4_K, Q5_K: the stored bytes as they are
    FERRY_CUDA_CHECK(cudaMemcpyAsync(base, host.data, host.nbytes(), cudaMemcpyHostToDevice, s));
  }
  dev.data = buf.data();
  weight_bytes_ += bf16_copy ? copy_at : buf.bytes();
  if (bf16_copy) copy_bytes_ += buf.bytes() - copy_at;
  if (bf16_copy) dequantize_to_bf16(host.dtype, weight_view(dev), reinterpret_cast<uint16_t*>(base + copy_at), s);
  keep.push_back(std::move(buf));
  return dev;
}

void CudaBackend::copy_to_device(const Tensor& dst, const void* src, size_t bytes) {
  require_cuda(dst, "copy_to_device destination");
  FERRY_ASSERT(bytes <= dst.nbytes());
  if (bytes == 0) return;
  const OpProfiler::Scope prof(profiler_.get(), "copy host->device", double(bytes));
  FERRY_CUDA_CHECK(cudaMemcpyAsync(dst.data, src, bytes, cudaMemcpyHostToDevice, stream_));
  if (!capturing_) {  // a captured copy reads its source when the graph replays, which a step's sync follows
    FERRY_CUDA_CHECK(cudaEventRecord(copy_done_, stream_));
    copy_pending_ = true;
  }
}

void CudaBackend::wait_for_copies() {
  if (!copy_pending_) return;
  FERRY_CUDA_CHECK(cudaEventSynchronize(copy_done_));
  copy_pending_ = false;
}

void CudaBackend::copy_to_host(void* dst, const Tensor& src, size_t bytes) {
  FERRY_CHECK(!capturing_, "CUDA backend: copy_to_host while capturing a step graph");
  require_cuda(src, "copy_to_host source");
  FERRY_ASSERT(bytes <= src.nbytes());
  {
    const OpProfiler::Scope prof(profiler_.get(), "copy device->host", double(bytes));
    if (bytes > 0) FERRY_CUDA_CHECK(cudaMemcpyAsync(dst, src.data, bytes, cudaMemcpyDeviceToHost, stream_));
  }
  FERRY_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (profiler_) profiler_->collect();
  check_device_errors();
}

void CudaBackend::synchronize() {
  FERRY_CHECK(!capturing_, "CUDA backend: synchronize while capturing a step graph");
  FERRY_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (profiler_) profiler_->collect();
  check_device_errors();
}

void CudaBackend::check_device_errors() {
  // Kernels write this mapped host memory; the stream is synchronized, so their writes are visible.
  volatile DeviceErrors* e = errors_;
  const uint32_t bits = e->bits;
  const int64_t value = e->value;
  if (bits == 0) return;
  e->bits = 0;
  e->value = 0;
  if (bits & kBadTokenId) fail("token id {} out of range of the embedding table", value);
  if (bits & kBadSlot) fail("KV cache slot {} out of range", value);
  if (bits & kBadRow) fail("gather_rows: row {} out of range", value);
  if (bits & kBadRouterLogit) fail("moe routing: a router logit of token {} is not finite", value);
  if (bits & kBadExpert) fail("moe routing: expert id {} out of range", value);
  fail("attention: block table entry {} out of range of the KV cache", value);
}

void CudaBackend::ensure(DeviceBuffer& buf, size_t bytes) {
  if (buf.bytes() >= bytes) return;
  FERRY_CHECK(!capturing_, "CUDA backend: scratch buffer of {} bytes must grow while capturing a step graph "
              "(run the step once without capture first)", bytes);
  ++scratch_epoch_;
  buf = DeviceBuffer();  // free first: the old and the new scratch need not both fit
  buf = alloc(bytes);
}

// ---- step graphs ----

DeviceBuffer CudaBackend::alloc_host(size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocDefault);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    fail("CUDA backend: cannot allocate {} bytes of page-locked host memory", bytes);
  }
  FERRY_CUDA_CHECK(e);
  return DeviceBuffer(p, bytes, Device::Cpu, [](void* q) { (void)cudaFreeHost(q); });
}

void CudaBackend::copy_to_host_async(void* dst, const Tensor& src, size_t bytes) {
  require_cuda(src, "copy_to_host_async source");
  FERRY_ASSERT(bytes <= src.nbytes());
  const OpProfiler::Scope prof(profiler_.get(), "copy device->host", double(bytes));
  if (bytes > 0) FERRY_CUDA_CHECK(cudaMemcpyAsync(dst, src.data, bytes, cudaMemcpyDeviceToHost, stream_));
}

void CudaBackend::begin_capture() {
  FERRY_CHECK(!capturing_, "CUDA backend: begin_capture while already capturing");
  FERRY_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
}

std::unique_ptr<StepGraph> CudaBackend::end_capture() {
  FERRY_CHECK(capturing_, "CUDA backend: end_capture without begin_capture");
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  FERRY_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  FERRY_CUDA_CHECK(e);
  return std::make_unique<CudaStepGraph>(exec, scratch_epoch_);
}

void CudaBackend::cancel_capture() {
  if (!capturing_) return;
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph) (void)cudaGraphDestroy(graph);
  (void)cudaGetLastError();  // an invalidated capture leaves an error behind
}

bool CudaBackend::replay(const StepGraph& graph) {
  FERRY_CHECK(!capturing_, "CUDA backend: replay while capturing a step graph");
  const auto* g = dynamic_cast<const CudaStepGraph*>(&graph);
  FERRY_CHECK(g != nullptr, "CUDA backend: replay of a graph captured by another backend");
  if (g->epoch() != scratch_epoch_) return false;
  FERRY_CUDA_CHECK(cudaGraphLaunch(g->exec(), stream_));
  return true;
}

// ---- ops ----

void CudaBackend::embedding(const Tensor& out, const Tensor& table, const Tensor& ids) {
  const OpProfiler::Scope prof(profiler_.get(), fmt::format("embedding {}", dtype_name(table.dtype)),
                               double(out.nbytes()) * 1.5);
  require_cuda(out, "embedding output");
  require_cuda(table, "embedding table");
  require_cuda(ids, "token ids");
  const int64_t n = ids.numel(), dim = table.cols();
  FERRY_ASSERT(ids.dtype == DType::I32 && out.dtype == DType::F32 && out.rows() == n && out.cols() == dim);
  FERRY_ASSERT(is_native_weight_type(table.dtype));
  cuda_ops::embedding(table.dtype, {.table = weight_view(table), .ids = ids.ptr<int32_t>(), .out = out.ptr<float>(),
                                    .n = n, .errors = errors_},
                      stream_);
}

void CudaBackend::rms_norm(const Tensor& out, const Tensor& x, const Tensor& weight, float eps) {
  const OpProfiler::Scope prof(profiler_.get(), fmt::format("rms_norm cols={}", x.cols()), 2.0 * double(x.nbytes()));
  require_cuda(out, "rms_norm output");
  require_cuda(x, "rms_norm input");
  require_cuda(weight, "rms_norm weight");
  const int64_t rows = x.rows(), cols = x.cols();
  FERRY_ASSERT(weight.numel() == cols && out.rows() == rows && out.cols() == cols);
  FERRY_ASSERT(x.dtype == DType::F32 && weight.dtype == DType::F32);
  FERRY_ASSERT(out.dtype == DType::F32 || out.dtype == DType::BF16);  // bf16: a GEMM's input (matmul_input_dtype)
  const bool bf16 = out.dtype == DType::BF16;
  cuda_ops::rms_norm({.out = bf16 ? nullptr : out.ptr<float>(), .x = x.ptr<float>(), .residual = nullptr,
                      .delta = nullptr, .weight = weight.ptr<float>(), .rows = rows, .cols = cols, .eps = eps,
                      .out_bf16 = bf16 ? static_cast<uint16_t*>(out.data) : nullptr},
                     stream_);
}

void CudaBackend::add_rms_norm(const Tensor& out, const Tensor& residual, const Tensor& delta, const Tensor& weight,
                               float eps) {
  const OpProfiler::Scope prof(profiler_.get(), "add_rms_norm", 4.0 * double(residual.nbytes()));
  require_cuda(out, "add_rms_norm output");
  require_cuda(residual, "add_rms_norm residual");
  require_cuda(delta, "add_rms_norm delta");
  require_cuda(weight, "add_rms_norm weight");
  const int64_t rows = residual.rows(), cols = residual.cols();
  FERRY_ASSERT(delta.rows() == rows && delta.cols() == cols && weight.numel() == cols);
  FERRY_ASSERT(out.rows() == rows && out.cols() == cols);
  FERRY_ASSERT(out.dtype == DType::F32 || out.dtype == DType::BF16);  // bf16: a GEMM's input (matmul_input_dtype)
  const bool bf16 = out.dtype == DType::BF16;
  cuda_ops::add_rms_norm({.out = bf16 ? nullptr : out.ptr<float>(), .x = nullptr, .residual = residual.ptr<float>(),
                          .delta = delta.ptr<float>(), .weight = weight.ptr<float>(), .rows = rows, .cols = cols,
                          .eps = eps, .out_bf16 = bf16 ? static_cast<uint16_t*>(out.data) : nullptr},
                         stream_);
}

DType CudaBackend::matmul_input_dtype(int64_t n_tokens) const {
  // Above 16 tokens every kernel the plan picks is a GEMM that reads bf16 activations (skinny, wgmma skinny,
  // cuBLASLt, the Hopper GEMM; batch-invariant mode: the Hopper GEMM at every n), so the norm writes them rounded
  // and matmul skips its conversion pass; at 16 and fewer the matvecs read f32.
  return n_tokens > 16 || options_.batch_invariant ? DType::BF16 : DType::F32;
}

cuda_ops::MatmulPlan CudaBackend::plan(int64_t n, const Tensor& w, const Tensor& out) const {
  cuda_ops::MatmulShape shape{.wtype = w.dtype, .rows = w.rows(), .cols = w.cols(), .n = n};
  if (w.dtype == DType::Stacked) {
    const StackedWeight& s = stacked(w);
    shape.wtype = s.head.dtype;
    shape.tail_rows = s.tail.rows();
    shape.tail_type = s.tail.dtype;
  }
  return cuda_ops::plan_matmul(shape,
                               {.bf16_weight = w.dtype == DType::BF16 || has_bf16_copy(options_, w.dtype),
                                .sm90_gemm = sm90_gemm_ != nullptr,
                                .out_aligned = reinterpret_cast<uintptr_t>(out.data) % 8 == 0,
                                .skinny_wgmma = wg_skinny_ != nullptr,
                                .batch_invariant = options_.batch_invariant,
                                .tune = options_.tune,
                                .n_sms = n_sms_,
                                .max_smem = max_smem_});
}

void CudaBackend::matmul(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias) {
  require_cuda(out, "matmul output");
  require_cuda(x, "matmul input");
  require_cuda(w, "matmul weight");
  FERRY_ASSERT((x.dtype == DType::F32 || x.dtype == DType::BF16) && out.dtype == DType::F32);
  FERRY_ASSERT(x.cols() == w.cols() && out.rows() == x.rows() && out.cols() == w.rows());
  FERRY_ASSERT(bias.empty() || (bias.numel() == w.rows() && bias.device == Device::Cuda));
  FERRY_ASSERT(is_native_weight_type(w.dtype) || w.dtype == DType::Stacked);
  const int64_t n = x.rows();
  if (n == 0) return;
  const cuda_ops::MatmulPlan p = plan(n, w, out);
  const bool matvec = p.kernel == cuda_ops::MatmulKernel::kMatvec;
  const OpProfiler::Scope prof(
      profiler_.get(),
      profiler_ ? fmt::format("matmul {} {} {}x{} n={}",
                              matvec ? cuda_ops::matvec_kernel_name(p.matvec) : cuda_ops::matmul_kernel_name(p.kernel),
                              dtype_name(w.dtype), w.rows(), w.cols(), token_bucket(n))
                : std::string(),
      double(weight_nbytes(w)) + double(x.nbytes()) + double(out.nbytes()));
  // bf16 activations come only at token counts where no matvec runs (matmul_input_dtype).
  FERRY_CHECK(x.dtype == DType::F32 || !matvec,
              "CUDA matmul: bf16 activations at {} tokens (the matvec reads f32; matmul_input_dtype says f32 here)", n);
  if (matvec && w.dtype == DType::Stacked) {  // the plan's one stacked launch (stream_quant_stacked)
    stacked_matvec(w, {.w = {}, .x = x.ptr<float>(), .bias = bias.empty() ? nullptr : bias.ptr<float>(),
                       .out = out.ptr<float>(), .n_tokens = 1, .stamps = matvec_stamps("matvec", w),
                       .one_level_acts = options_.tune.act_levels == 1});
  } else if (matvec) {
    // The matvec's activation scratch (quantized weights: int8 activations) reuses x_bf16_, which only the
    // GEMM path otherwise uses, in stream order.
    const size_t scratch = cuda_ops::matvec_scratch_bytes(w.dtype, p.matvec, int(n), w.cols());
    if (scratch > 0) ensure(x_bf16_, scratch);
    cuda_ops::matvec(w.dtype, {.w = weight_view(w), .x = x.ptr<float>(),
                               .bias = bias.empty() ? nullptr : bias.ptr<float>(), .out = out.ptr<float>(),
                               .n_tokens = int(n), .kernel = p.matvec,
                               .scratch = scratch > 0 ? x_bf16_.data() : nullptr,
                               .stamps = matvec_stamps("matvec", w), .stream = weight_stream(w.dtype),
                               .one_level_acts = options_.tune.act_levels == 1},
                     stream_);
  } else {
    matmul_gemm(out, x, w, bias, p.kernel);
  }
}

const uint16_t* CudaBackend::gemm_weight_bf16(const Tensor& w) {
  const int64_t n_in = w.cols(), n_out = w.rows();
  if (w.dtype == DType::BF16) return w.ptr<uint16_t>();
  if (w.dtype == DType::Stacked) {  // (rows, cols) bf16: the stack's copy, or both runs dequantized into one
    const StackedWeight& s = stacked(w);
    if (s.bf16 != nullptr) return s.bf16;
    ensure(w_bf16_, size_t(n_out) * size_t(n_in) * 2);
    auto* b = static_cast<uint16_t*>(w_bf16_.data());
    dequantize_to_bf16(s.head.dtype, weight_view(s.head), b, stream_);
    dequantize_to_bf16(s.tail.dtype, weight_view(s.tail), b + size_t(s.head.rows()) * size_t(n_in), stream_);
    return b;
  }
  if (has_bf16_copy(options_, w.dtype))
    return reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(w.data) + bf16_copy_offset(w.dtype, n_out, n_in));
  ensure(w_bf16_, size_t(n_out) * size_t(n_in) * 2);
  dequantize_to_bf16(w.dtype, weight_view(w), static_cast<uint16_t*>(w_bf16_.data()), stream_);
  return static_cast<const uint16_t*>(w_bf16_.data());
}

const uint16_t* CudaBackend::gemm_x_bf16(const Tensor& x) {
  if (x.dtype == DType::BF16) return x.ptr<uint16_t>();  // the norm wrote it rounded already
  ensure(x_bf16_, size_t(x.rows()) * size_t(x.cols()) * 2);
  f32_to_bf16(x.ptr<float>(), static_cast<uint16_t*>(x_bf16_.data()), x.rows() * x.cols(), stream_);
  return static_cast<const uint16_t*>(x_bf16_.data());
}

void CudaBackend::matmul_gemm(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                              cuda_ops::MatmulKernel kernel) {
  const int64_t n = x.rows(), n_in = x.cols(), n_out = w.rows();
  const uint16_t* wb = gemm_weight_bf16(w);
  const uint16_t* xq = gemm_x_bf16(x);  // (n, n_in) bf16
  const bool sm90_fits = sm90_gemm_ && Sm90Gemm::supports(n, n_out, n_in) && reinterpret_cast<uintptr_t>(out.data) % 8 == 0;
  if (options_.batch_invariant) {
    // One tile shape for every token count: a row's K-order of accumulation is then the same in any batch.
    FERRY_CHECK(sm90_fits, "batch-invariant mode: the Hopper GEMM does not take a {}x{} weight (k must be a multiple "
                "of 8, n even)", n_out, n_in);
    const cuda_ops::GemmTile fixed = cuda_ops::GemmTile::k128x128;
    sm90_gemm_->run(out.ptr<float>(), xq, wb, n, n_out, n_in, stream_, &fixed);
  } else if (kernel == cuda_ops::MatmulKernel::kGemmSm90 && sm90_fits) {
    sm90_gemm_->run(out.ptr<float>(), xq, wb, n, n_out, n_in, stream_);
  } else if (kernel == cuda_ops::MatmulKernel::kSkinnyMma) {
    int sms = 0;
    FERRY_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, options_.device_index));
    cuda_ops::skinny_gemm({.out = out.ptr<float>(), .x = xq, .w = wb, .n = n,
                           .rows = n_out, .k = n_in},
                          cuda_ops::make_skinny_plan(n, n_out, n_in, sms), stream_);
  } else if (kernel == cuda_ops::MatmulKernel::kSkinnyWgmma && reinterpret_cast<uintptr_t>(wb) % 16 == 0) {  // TMA
    wg_skinny_->run({.out = out.ptr<float>(), .x = xq, .w = wb, .n = n,
                     .rows = n_out, .k = n_in},
                    stream_);
  } else {
    ensure(gemm_workspace_, kGemmWorkspaceBytes);
    gemm_->run(out.ptr<float>(), xq, wb, n, n_out, n_in,
               gemm_workspace_.data(), gemm_workspace_.bytes(), stream_);
  }
  if (!bias.empty()) add_bias(out.ptr<float>(), bias.ptr<float>(), n, n_out, stream_);
}

void CudaBackend::swiglu(const Tensor& out, const Tensor& gate, const Tensor& up) {
  const OpProfiler::Scope prof(profiler_.get(), "swiglu", 3.0 * double(gate.nbytes()));
  require_cuda(out, "swiglu output");
  require_cuda(gate, "swiglu gate");
  require_cuda(up, "swiglu up");
  const int64_t total = gate.numel();
  FERRY_ASSERT(up.numel() == total && out.numel() == total);
  cuda_ops::swiglu(out.ptr<float>(), gate.ptr<float>(), up.ptr<float>(), total, stream_);
}

void CudaBackend::swiglu_fused(const Tensor& out, const Tensor& gate_up) {
  const OpProfiler::Scope prof(profiler_.get(), "swiglu_fused", 1.5 * double(gate_up.nbytes()));
  require_cuda(out, "swiglu output");
  require_cuda(gate_up, "swiglu gate|up");
  const int64_t n = gate_up.rows(), hidden = gate_up.cols() / 2;
  FERRY_ASSERT(gate_up.cols() == 2 * hidden && out.rows() == n && out.cols() == hidden);
  FERRY_ASSERT((out.dtype == DType::F32 || out.dtype == DType::BF16) && gate_up.dtype == DType::F32);
  const bool bf16 = out.dtype == DType::BF16;  // the down projection's GEMM input (matmul_input_dtype)
  cuda_ops::swiglu_fused({.out = bf16 ? nullptr : out.ptr<float>(), .gate_up = gate_up.ptr<float>(), .n = n,
                          .hidden = hidden, .out_bf16 = bf16 ? static_cast<uint16_t*>(out.data) : nullptr},
                         stream_);
}

void CudaBackend::matmul_swiglu(const Tensor& out, const Tensor& gate_up, const Tensor& x, const Tensor& w) {
  require_cuda(out, "matmul_swiglu output");
  require_cuda(x, "matmul_swiglu input");
  require_cuda(w, "matmul_swiglu weight");
  const int64_t n = x.rows(), hidden = w.rows() / 2, dim = w.cols();
  FERRY_ASSERT((x.dtype == DType::F32 || x.dtype == DType::BF16) && w.rows() == 2 * hidden && x.cols() == dim);
  FERRY_ASSERT(out.dtype == DType::F32 || out.dtype == DType::BF16);  // bf16: the down projection's GEMM input
  FERRY_ASSERT(out.rows() == n && out.cols() == hidden);
  if (n == 0) return;
  const bool out_bf16 = out.dtype == DType::BF16;
  using cuda_ops::SwigluKernel;
  const SwigluKernel kernel = plan(n, w).swiglu;
  // The operands each fused form reads: the streams f32 activations (16-byte aligned) into f32 outputs, the GEMM
  // any activations into an output aligned for its stores.
  const bool stream_operands = x.dtype == DType::F32 && !out_bf16 && reinterpret_cast<uintptr_t>(x.data) % 16 == 0;
  const bool fused = (kernel == SwigluKernel::kStreamHalf || kernel == SwigluKernel::kStreamQuant)
                         ? stream_operands
                         : kernel == SwigluKernel::kGemmSm90 &&
                               reinterpret_cast<uintptr_t>(out.data) % (out_bf16 ? 4 : 8) == 0;
  if (!fused) {
    Backend::matmul_swiglu(out, gate_up, x, w);
    return;
  }
  const OpProfiler::Scope prof(
      profiler_.get(),
      profiler_ ? fmt::format("matmul_swiglu {} {} {}x{} n={}",
                              kernel == SwigluKernel::kStreamHalf    ? "stream_half"
                              : kernel == SwigluKernel::kStreamQuant ? "stream_quant"
                                                                     : "gemm_sm90",
                              dtype_name(w.dtype), w.rows(), dim, token_bucket(n))
                : std::string(),
      double(w.nbytes()) + double(x.nbytes()) + double(out.nbytes()));
  if (kernel == SwigluKernel::kStreamHalf) {
    cuda_ops::stream_half_swiglu(w.dtype, {.w = weight_view(w), .x = x.ptr<float>(), .bias = nullptr,
                                           .out = out.ptr<float>(), .n_tokens = 1,
                                           .kernel = cuda_ops::MatvecKernel::kStreamHalf,
                                           .stream = weight_stream(w.dtype)},
                                 stream_);
    return;
  }
  if (kernel == SwigluKernel::kStreamQuant) {
    cuda_ops::stream_quant_swiglu(w.dtype, {.w = weight_view(w), .x = x.ptr<float>(), .bias = nullptr,
                                            .out = out.ptr<float>(), .n_tokens = 1,
                                            .kernel = cuda_ops::MatvecKernel::kStreamQuant,
                                            .stream = weight_stream(w.dtype),
                                            .one_level_acts = options_.tune.act_levels == 1},
                                  stream_);
    return;
  }
  const uint16_t* wb = gemm_weight_bf16(w);
  const uint16_t* xb = gemm_x_bf16(x);
  const cuda_ops::GemmTile fixed = cuda_ops::GemmTile::k128x128;  // batch-invariant mode: matmul_gemm's tile
  if (out_bf16) {
    sm90_gemm_->run_swiglu_bf16(static_cast<uint16_t*>(out.data), xb, wb, n, hidden, dim, stream_,
                                options_.batch_invariant ? &fixed : nullptr);
  } else {
    sm90_gemm_->run_swiglu(out.ptr<float>(), xb, wb, n, hidden, dim, stream_,
                           options_.batch_invariant ? &fixed : nullptr);
  }
}

cuda_ops::WeightStream CudaBackend::weight_stream(DType t) const {
  const bool bf16 = t == DType::BF16 || t == DType::F16;
  return {.ring_inflight = bf16 ? options_.tune.ring_half : options_.tune.ring_quant, .evict_first = true};
}

cuda_ops::PhaseStamps CudaBackend::matvec_stamps(const char* what, const Tensor& w) {
  if (!stamps_) return {};
  return stamps_->slots(fmt::format("{} {} {}x{}", what, std::string(dtype_name(w.dtype)), w.rows(), w.cols()),
                        {"waited", "acts", "consumed", "stored"});
}

void CudaBackend::gather_rows(const Tensor& out, const Tensor& x, const Tensor& rows) {
  const OpProfiler::Scope prof(profiler_.get(), "gather_rows", 2.0 * double(out.nbytes()));
  require_cuda(out, "gather_rows output");
  require_cuda(x, "gather_rows input");
  require_cuda(rows, "gather_rows rows");
  const int64_t m = rows.numel();
  FERRY_ASSERT(out.rows() == m && out.cols() == x.cols() && out.dtype == x.dtype && rows.dtype == DType::I32);
  FERRY_ASSERT(x.row_bytes() % 4 == 0);
  cuda_ops::gather_rows({.out = out.data, .x = x.data, .rows = rows.ptr<int32_t>(), .m = m, .x_rows = x.rows(),
                         .row_words = int64_t(x.row_bytes() / 4), .errors = errors_},
                        stream_);
}

void CudaBackend::sample(const Tensor& out, const Tensor& logits, std::span<const SamplingParams> params,
                         std::span<const uint64_t> positions, std::span<const uint64_t> mask) {
  FERRY_CHECK(!capturing_, "CUDA backend: sample() cannot be captured in a step graph yet");
  require_cuda(out, "sample output");
  require_cuda(logits, "sample logits");
  const int64_t m = logits.rows();
  FERRY_ASSERT(logits.dtype == DType::F32 && out.dtype == DType::I32 && out.numel() == m);
  const int64_t words = (logits.cols() + 63) / 64;
  FERRY_ASSERT(params.size() == size_t(m) && positions.size() == size_t(m));
  FERRY_CHECK(mask.empty() || mask.size() == size_t(m * words), "CUDA sampling: {} mask words for {} rows of {}",
              mask.size(), m, logits.cols());
  if (m == 0) return;
  std::vector<cuda_ops::SampleRowParams> rows(static_cast<size_t>(m));
  for (size_t i = 0; i < rows.size(); ++i) {
    const SamplingParams& sp = params[i];
    FERRY_CHECK(!sp.penalties_active(), "CUDA sampling: penalties are not supported on the GPU (row {})", i);
    rows[i] = {sp.temperature, sp.top_k, sp.top_p, sp.min_p, sp.seed, positions[i]};
  }
  // Not ensure(): this buffer is never read by a captured graph, so growing it must not make graphs stale.
  const size_t bytes = rows.size() * sizeof(rows[0]);
  if (sample_rows_.bytes() < bytes) {
    sample_rows_ = DeviceBuffer();
    sample_rows_ = alloc(std::max<size_t>(rows.size(), 256) * sizeof(rows[0]));
  }
  // The settings go through page-locked memory: a copy from pageable memory may wait for the stream, which would
  // stall the host behind the step it just enqueued (asynchronous scheduling). A ring of slots, each reused only
  // after the copy that last read it has run.
  SampleStaging& slot = sample_staging_[sample_staging_next_];
  sample_staging_next_ = (sample_staging_next_ + 1) % sample_staging_.size();
  if (slot.copied) FERRY_CUDA_CHECK(cudaEventSynchronize(slot.copied));
  if (slot.host.bytes() < bytes) {
    slot.host = DeviceBuffer();
    slot.host = alloc_host(std::max<size_t>(rows.size(), 256) * sizeof(rows[0]));
  }
  if (!slot.copied) {
    cudaEvent_t ev = nullptr;
    FERRY_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    slot.copied = ev;
  }
  std::memcpy(slot.host.data(), rows.data(), bytes);
  FERRY_CUDA_CHECK(cudaMemcpyAsync(sample_rows_.data(), slot.host.data(), bytes, cudaMemcpyHostToDevice, stream_));
  if (!mask.empty()) {  // structured output: the masked logits are -inf before any pass reads them
    const size_t mask_bytes = mask.size_bytes();
    if (slot.mask.bytes() < mask_bytes) {
      slot.mask = DeviceBuffer();
      slot.mask = alloc_host(mask_bytes);
    }
    if (sample_mask_.bytes() < mask_bytes) {
      sample_mask_ = DeviceBuffer();
      sample_mask_ = alloc(mask_bytes);
    }
    std::memcpy(slot.mask.data(), mask.data(), mask_bytes);
    FERRY_CUDA_CHECK(cudaMemcpyAsync(sample_mask_.data(), slot.mask.data(), mask_bytes, cudaMemcpyHostToDevice, stream_));
    cuda_ops::apply_token_mask({.logits = logits.ptr<float>(), .mask = static_cast<const uint64_t*>(sample_mask_.data()),
                                .m = m, .vocab = logits.cols(), .words = words},
                               stream_);
  }
  FERRY_CUDA_CHECK(cudaEventRecord(slot.copied, stream_));
  // The streaming passes split over blocks at every m (sampling_heuristics.h); their scratch grows like
  // sample_rows_; the plan sizes the blocks by m (fixed huge blocks ran in waves at many rows: docs/perf-log.md).
  if (sample_parts_.bytes() < cuda_ops::sample_rows_parts_bytes(m)) {
    sample_parts_ = DeviceBuffer();
    sample_parts_ = alloc(cuda_ops::sample_rows_parts_bytes(std::max<int64_t>(m, 256)));
  }
  // The fast paths' scratch (SampleParams::cand) when a row may take one (the top-k path, the nucleus path; other
  // rows ignore it): zeroed when allocated and left zeroed by every call. ~93 KB a row at a 128K vocabulary.
  const cuda_ops::SampleRowsNeed need = cuda_ops::sample_rows_need(rows.data(), m, logits.cols());
  const bool fast = need.cand;
  // (Its rows' layout depends on the vocabulary: a new one re-zeroes it.)
  if (fast && (sample_cand_.bytes() < cuda_ops::sample_rows_cand_bytes(m, logits.cols()) ||
               sample_cand_vocab_ != logits.cols())) {
    sample_cand_vocab_ = logits.cols();
    sample_cand_ = DeviceBuffer();
    sample_cand_ = alloc(cuda_ops::sample_rows_cand_bytes(std::max<int64_t>(m, 64), logits.cols()));
    FERRY_CUDA_CHECK(cudaMemsetAsync(sample_cand_.data(), 0, sample_cand_.bytes(), stream_));
  }
  cuda_ops::sample_rows({.logits = logits.ptr<float>(), .m = m, .vocab = logits.cols(),
                         .rows = static_cast<const cuda_ops::SampleRowParams*>(sample_rows_.data()),
                         .out = out.ptr<int32_t>(), .parts = sample_parts_.data(),
                         .cand = fast ? sample_cand_.data() : nullptr, .nucleus = need.nucleus},
                        stream_);
}

void CudaBackend::resolve_placeholders(const Tensor& ids, const Tensor& sampled) {
  require_cuda(ids, "resolve_placeholders ids");
  require_cuda(sampled, "resolve_placeholders sampled ids");
  FERRY_ASSERT(ids.dtype == DType::I32 && sampled.dtype == DType::I32);
  cuda_ops::resolve_placeholders({.ids = ids.ptr<int32_t>(), .sampled = sampled.ptr<int32_t>(), .n = ids.numel(),
                                  .n_sampled = sampled.numel(), .errors = errors_},
                                 stream_);
}

uint64_t CudaBackend::mark() {
  FERRY_CHECK(!capturing_, "CUDA backend: mark() while capturing a step graph");
  const uint64_t ticket = ++marks_made_;
  FERRY_CUDA_CHECK(cudaEventRecord(marks_[(ticket - 1) % marks_.size()], stream_));
  return ticket;
}

void CudaBackend::wait_mark(uint64_t ticket) {
  FERRY_CHECK(ticket >= 1 && ticket <= marks_made_ && marks_made_ - ticket < marks_.size(),
              "CUDA backend: stream mark {} is not among the last {} of {}", ticket, marks_.size(), marks_made_);
  FERRY_CUDA_CHECK(cudaEventSynchronize(marks_[(ticket - 1) % marks_.size()]));
  // Errors any kernel reported so far (possibly one enqueued after the mark: it fails a step early, not silently).
  check_device_errors();
}

}  // namespace ferry
