#include "backends/cuda/gemm_cublaslt.h"

#include <memory>

#include "core/check.h"

namespace ferry::cuda_ops {
namespace {

void check_cublas(cublasStatus_t st, const char* what) {
  FERRY_CHECK(st == CUBLAS_STATUS_SUCCESS, "cuBLASLt error {} ({}) in {}", int(st), cublasLtGetStatusString(st), what);
}
#define FERRY_CUBLAS_CHECK(expr) check_cublas((expr), #expr)

// RAII owners of the descriptors of one call.
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

CublasLtGemm::CublasLtGemm() { FERRY_CUBLAS_CHECK(cublasLtCreate(&handle_)); }

CublasLtGemm::~CublasLtGemm() {
  if (handle_) cublasLtDestroy(handle_);
}

void CublasLtGemm::run(float* out, const uint16_t* x, const uint16_t* w, int64_t n, int64_t n_out, int64_t n_in,
                       void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  // cuBLASLt is column-major. Row-major out (n, n_out) is column-major D (n_out x n), ld n_out; row-major w
  // (n_out, n_in) is column-major (n_in x n_out), used transposed as A (n_out x n_in); row-major x (n, n_in)
  // is column-major B (n_in x n), ld n_in. D = op(A) · B with op(A) = Aᵀ.
  MatmulDesc desc;
  FERRY_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  FERRY_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  FERRY_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  Layout a, b, d;
  FERRY_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a.d, CUDA_R_16BF, uint64_t(n_in), uint64_t(n_out), n_in));
  FERRY_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b.d, CUDA_R_16BF, uint64_t(n_in), uint64_t(n), n_in));
  FERRY_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.d, CUDA_R_32F, uint64_t(n_out), uint64_t(n), n_out));
  Preference pref;
  FERRY_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.d));
  FERRY_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                          &workspace_bytes, sizeof(workspace_bytes)));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  FERRY_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, desc.d, a.d, b.d, d.d, d.d, pref.d, 1, &heuristic, &found));
  FERRY_CHECK(found > 0, "cuBLASLt has no bf16 GEMM algorithm for {} x {} x {}", n, n_out, n_in);
  const float alpha = 1.0f, beta = 0.0f;
  FERRY_CUBLAS_CHECK(cublasLtMatmul(handle_, desc.d, &alpha, w, a.d, x, b.d, &beta, out, d.d, out, d.d,
                                    &heuristic.algo, workspace, workspace_bytes, stream));
}

}  // namespace ferry::cuda_ops
