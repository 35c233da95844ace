#include "backends/cuda/matmul/gemm_cublaslt.h"

#include "core/check.h"

namespace ferry::cuda_ops {
namespace {

constexpr size_t kMaxPlans = 64;  // distinct (n, n_out, n_in) shapes kept; prefill chunk sizes vary

void check_cublas(cublasStatus_t st, const char* what) {
  FERRY_CHECK(st == CUBLAS_STATUS_SUCCESS, "cuBLASLt error {} ({}) in {}", int(st), cublasLtGetStatusString(st), what);
}
#define FERRY_CUBLAS_CHECK(expr) check_cublas((expr), #expr)

// RAII owners of cuBLASLt descriptors.
struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  ~MatmulDesc() { if (d) cublasLtMatmulDescDestroy(d); }
};
struct Layout {
  cublasLtMatrixLayout_t d = nullptr;
  ~Layout() { if (d) cublasLtMatrixLayoutDestroy(d); }
};
struct Preference {
  cublasLtMatmulPreference_t d = nullptr;
  ~Preference() { if (d) cublasLtMatmulPreferenceDestroy(d); }
};

}  // namespace

struct CublasLtGemm::Plan {
  int64_t n = 0, n_out = 0, n_in = 0;
  size_t workspace_bytes = 0;
  MatmulDesc desc;
  Layout a, b, d;
  cublasLtMatmulAlgo_t algo{};
};

CublasLtGemm::CublasLtGemm() { FERRY_CUBLAS_CHECK(cublasLtCreate(&handle_)); }

CublasLtGemm::~CublasLtGemm() {
  plans_.clear();  // descriptors before the handle
  if (handle_) cublasLtDestroy(handle_);
}

const CublasLtGemm::Plan& CublasLtGemm::plan_for(int64_t n, int64_t n_out, int64_t n_in, size_t workspace_bytes) {
  for (const auto& p : plans_) {
    if (p->n == n && p->n_out == n_out && p->n_in == n_in && p->workspace_bytes == workspace_bytes) return *p;
  }
  // cuBLASLt is column-major. Row-major out (n, n_out) is column-major D (n_out x n), ld n_out; row-major w
  // (n_out, n_in) is column-major (n_in x n_out), used transposed as A (n_out x n_in); row-major x (n, n_in)
  // is column-major B (n_in x n), ld n_in. D = op(A) · B with op(A) = Aᵀ.
  auto plan = std::make_unique<Plan>();
  plan->n = n;
  plan->n_out = n_out;
  plan->n_in = n_in;
  plan->workspace_bytes = workspace_bytes;
  FERRY_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc.d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  FERRY_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan->desc.d, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  FERRY_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan->desc.d, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  FERRY_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a.d, CUDA_R_16BF, uint64_t(n_in), uint64_t(n_out), n_in));
  FERRY_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b.d, CUDA_R_16BF, uint64_t(n_in), uint64_t(n), n_in));
  FERRY_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->d.d, CUDA_R_32F, uint64_t(n_out), uint64_t(n), n_out));
  Preference pref;
  FERRY_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.d));
  FERRY_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                          &workspace_bytes, sizeof(workspace_bytes)));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  FERRY_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc.d, plan->a.d, plan->b.d, plan->d.d,
                                                    plan->d.d, pref.d, 1, &heuristic, &found));
  FERRY_CHECK(found > 0, "cuBLASLt has no bf16 GEMM algorithm for {} x {} x {}", n, n_out, n_in);
  plan->algo = heuristic.algo;
  if (plans_.size() < kMaxPlans) {
    plans_.push_back(std::move(plan));
    return *plans_.back();
  }
  const size_t victim = next_victim_;
  next_victim_ = (next_victim_ + 1) % kMaxPlans;
  plans_[victim] = std::move(plan);
  return *plans_[victim];
}

void CublasLtGemm::run(float* out, const uint16_t* x, const uint16_t* w, int64_t n, int64_t n_out, int64_t n_in,
                       void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  const Plan& plan = plan_for(n, n_out, n_in, workspace_bytes);
  const float alpha = 1.0f, beta = 0.0f;
  FERRY_CUBLAS_CHECK(cublasLtMatmul(handle_, plan.desc.d, &alpha, w, plan.a.d, x, plan.b.d, &beta, out, plan.d.d,
                                    out, plan.d.d, &plan.algo, workspace, workspace_bytes, stream));
}

}  // namespace ferry::cuda_ops
