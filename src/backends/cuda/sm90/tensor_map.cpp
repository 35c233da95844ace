// Hopper TMA descriptors (tensor_map.h).
#include "backends/cuda/sm90/tensor_map.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "backends/cuda/common/launch.cuh"

namespace ferry::cuda_ops {

void* find_tensor_map_encoder() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || fn == nullptr) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return fn;
}

HopperTma find_hopper_tma(int device) {
  HopperTma t;
  int major = 0;
  FERRY_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  FERRY_CUDA_CHECK(cudaDeviceGetAttribute(&t.num_sms, cudaDevAttrMultiProcessorCount, device));
  if (major == 9) t.encode = find_tensor_map_encoder();
  return t;
}

CUtensorMap make_bf16_tmap(void* encode, const uint16_t* base, int64_t rows, int64_t cols, int box_cols, int box_rows) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(cols) * 2};
  const cuuint32_t box[2] = {cuuint32_t(box_cols), cuuint32_t(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(encode)(
      &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<uint16_t*>(base), dims, strides, box, elem_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  FERRY_CUDA_REQUIRE(r == CUDA_SUCCESS);
  return map;
}

}  // namespace ferry::cuda_ops
