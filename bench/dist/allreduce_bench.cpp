// The collectives of one tensor-parallel decode step at batch 1, timed on their own: per layer two f32
// all-reduces of (tokens, dim) (after wo and w_down), one for the embedding, and the vocab-parallel logits
// all-gather of (tokens, V/N + 1) per rank. One process drives every visible GPU (ncclCommInitAll); each GPU's
// step is captured in a CUDA graph (as ferry's decode step is) and replayed; the time per step is the mean of
// the slowest GPU over the replays.
//
//   allreduce_bench [--layers 32] [--dim 4096] [--vocab 128256] [--tokens 1] [--iters 200]
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CHECK_CUDA(x)                                                                  \
  do {                                                                                 \
    cudaError_t e = (x);                                                               \
    if (e != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)
#define CHECK_NCCL(x)                                                                  \
  do {                                                                                 \
    ncclResult_t r = (x);                                                              \
    if (r != ncclSuccess) {                                                            \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, ncclGetErrorString(r)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

int main(int argc, char** argv) {
  int layers = 32, dim = 4096, vocab = 128256, tokens = 1, iters = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (a == "--layers") layers = v;
    else if (a == "--dim") dim = v;
    else if (a == "--vocab") vocab = v;
    else if (a == "--tokens") tokens = v;
    else if (a == "--iters") iters = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  int n = 0;
  CHECK_CUDA(cudaGetDeviceCount(&n));
  if (n < 2) {
    std::printf("allreduce_bench: %d GPU(s): nothing to measure\n", n);
    return 0;
  }
  std::vector<ncclComm_t> comms(static_cast<size_t>(n));
  std::vector<int> devs(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) devs[size_t(i)] = i;
  CHECK_NCCL(ncclCommInitAll(comms.data(), n, devs.data()));
  const size_t hidden = size_t(tokens) * size_t(dim);                 // f32 elements per all-reduce
  const size_t part = size_t(tokens) * size_t((vocab + n - 1) / n + 1);  // f32 logits per rank
  std::vector<float*> x(static_cast<size_t>(n)), logits(static_cast<size_t>(n));
  std::vector<cudaStream_t> streams(static_cast<size_t>(n));
  std::vector<cudaGraphExec_t> graphs(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    CHECK_CUDA(cudaSetDevice(i));
    CHECK_CUDA(cudaStreamCreateWithFlags(&streams[size_t(i)], cudaStreamNonBlocking));
    CHECK_CUDA(cudaMalloc(&x[size_t(i)], hidden * 4));
    CHECK_CUDA(cudaMalloc(&logits[size_t(i)], part * size_t(n) * 4));
    CHECK_CUDA(cudaMemset(x[size_t(i)], 0, hidden * 4));
  }
  const auto enqueue_step = [&](int i) {
    const int collectives = 2 * layers + 1;
    for (int c = 0; c < collectives; ++c)
      CHECK_NCCL(ncclAllReduce(x[size_t(i)], x[size_t(i)], hidden, ncclFloat32, ncclSum, comms[size_t(i)], streams[size_t(i)]));
    CHECK_NCCL(ncclAllGather(logits[size_t(i)] + part * size_t(i), logits[size_t(i)], part, ncclFloat32, comms[size_t(i)],
                             streams[size_t(i)]));
  };
  // Capture: every rank's stream in capture at once, inside one NCCL group (one process, many GPUs).
  for (int i = 0; i < n; ++i) {
    CHECK_CUDA(cudaSetDevice(i));
    CHECK_CUDA(cudaStreamBeginCapture(streams[size_t(i)], cudaStreamCaptureModeRelaxed));
  }
  CHECK_NCCL(ncclGroupStart());
  for (int i = 0; i < n; ++i) {
    CHECK_CUDA(cudaSetDevice(i));
    enqueue_step(i);
  }
  CHECK_NCCL(ncclGroupEnd());
  for (int i = 0; i < n; ++i) {
    CHECK_CUDA(cudaSetDevice(i));
    cudaGraph_t g;
    CHECK_CUDA(cudaStreamEndCapture(streams[size_t(i)], &g));
    CHECK_CUDA(cudaGraphInstantiate(&graphs[size_t(i)], g, 0));
    CHECK_CUDA(cudaGraphDestroy(g));
  }
  const auto run = [&](int reps) {
    for (int r = 0; r < reps; ++r)
      for (int i = 0; i < n; ++i) {
        CHECK_CUDA(cudaSetDevice(i));
        CHECK_CUDA(cudaGraphLaunch(graphs[size_t(i)], streams[size_t(i)]));
      }
    for (int i = 0; i < n; ++i) {
      CHECK_CUDA(cudaSetDevice(i));
      CHECK_CUDA(cudaStreamSynchronize(streams[size_t(i)]));
    }
  };
  run(10);  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  run(iters);
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
  std::printf("allreduce_bench: %d GPUs, %d layers, dim %d, %d token(s): %d all-reduces of %zu B + all-gather of %zu B "
              "per rank: %.1f us per step (%.2f us per all-reduce incl. the gather's share)\n",
              n, layers, dim, tokens, 2 * layers + 1, hidden * 4, part * 4, us, us / (2 * layers + 2));
  for (int i = 0; i < n; ++i) ncclCommDestroy(comms[size_t(i)]);
  return 0;
}
