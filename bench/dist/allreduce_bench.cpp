// The collectives of tensor-parallel decode steps, timed on their own, NCCL next to ferry's one-shot peer
// all-reduce (backends/cuda/peer_all_reduce.h). One process drives every visible GPU (ncclCommInitAll; the
// peer all-reduce through plain peer pointers). Every measurement is a CUDA graph per GPU (as ferry's decode
// step is) of `calls` collectives, replayed; time = wall time of the replays / replays, i.e. the slowest GPU.
//
//  1. per size (8 KiB .. 512 KiB f32): one all-reduce's time, NCCL and peer under each PeerProtocol (lamport,
//     flags) (graph of 65 calls, / 65)
//  2. one decode step at batch `--tokens`: 2 * layers + 1 all-reduces of tokens x dim f32 (after the
//     embedding, wo, w_down) + the vocab-parallel logits all-gather (NCCL), with NCCL or with peer all-reduces
//
// Every failure prints a message: CUDA / NCCL errors name the call, a stage watchdog names the stage that hangs
// (--timeout s), a fatal signal names the stage; stdout is unbuffered.
//
//   allreduce_bench [--layers 32] [--dim 4096] [--vocab 128256] [--tokens 1] [--iters 200] [--timeout 60]
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "backends/cuda/comm/peer_all_reduce.h"

namespace {

std::atomic<const char*> g_stage{"start"};  // what the bench is doing (read by the watchdog and signal handler)

void stage(const char* s) {
  g_stage = s;
  std::fprintf(stderr, "allreduce_bench: %s\n", s);
}

void on_signal(int sig) {
  const char* s = g_stage.load();
  const char* a = "allreduce_bench: fatal signal during stage: ";
  (void)!write(2, a, std::strlen(a));
  (void)!write(2, s, std::strlen(s));
  (void)!write(2, "\n", 1);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

#define CHECK_CUDA(x)                                                                                   \
  do {                                                                                                  \
    cudaError_t e = (x);                                                                                \
    if (e != cudaSuccess) {                                                                             \
      std::printf("allreduce_bench: FAILED in stage '%s': %s:%d %s: %s\n", g_stage.load(), __FILE__, __LINE__, #x, \
                  cudaGetErrorString(e));                                                               \
      std::exit(1);                                                                                     \
    }                                                                                                   \
  } while (0)
#define CHECK_NCCL(x)                                                                                   \
  do {                                                                                                  \
    ncclResult_t r = (x);                                                                               \
    if (r != ncclSuccess) {                                                                             \
      std::printf("allreduce_bench: FAILED in stage '%s': %s:%d %s: %s (%s)\n", g_stage.load(), __FILE__, __LINE__, \
                  #x, ncclGetErrorString(r), ncclGetLastError(nullptr) ? ncclGetLastError(nullptr) : "");   \
      std::exit(1);                                                                                     \
    }                                                                                                   \
  } while (0)

struct Gpus {
  int n = 0;
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams;
  std::vector<float*> x, logits;                        // per GPU: [max_elems] f32; [vocab part * n] f32
  std::vector<std::unique_ptr<ferry::PeerAllReduce>> peer, peer_flags;  // per GPU: kLamport, kFlags
};

enum class Kind { Nccl, Peer, PeerFlags };
const char* kind_name(Kind k) { return k == Kind::Nccl ? "NCCL" : k == Kind::Peer ? "peer (lamport)" : "peer (flags)"; }

// Enqueues `calls` all-reduces of x[0 .. elems) on GPU i (NCCL calls of all GPUs inside one group by the caller).
void enqueue(Gpus& g, int i, Kind kind, size_t elems, int calls) {
  for (int c = 0; c < calls; ++c) {
    if (kind == Kind::Nccl) {
      CHECK_NCCL(ncclAllReduce(g.x[size_t(i)], g.x[size_t(i)], elems, ncclFloat32, ncclSum, g.comms[size_t(i)],
                               g.streams[size_t(i)]));
    } else {
      (kind == Kind::Peer ? g.peer : g.peer_flags)[size_t(i)]->run(g.x[size_t(i)], elems, g.streams[size_t(i)]);
    }
  }
}

void sync_all(Gpus& g) {
  for (int i = 0; i < g.n; ++i) {
    CHECK_CUDA(cudaSetDevice(i));
    CHECK_CUDA(cudaStreamSynchronize(g.streams[size_t(i)]));
  }
}

// Runs body(i) for every GPU once eagerly (connections are made outside any capture), then captures it into one
// graph per GPU and replays that `iters` times. Returns microseconds per replay.
double time_graph(Gpus& g, const std::function<void(int)>& body, int iters) {
  stage("eager warm-up");
  CHECK_NCCL(ncclGroupStart());
  for (int i = 0; i < g.n; ++i) {
    CHECK_CUDA(cudaSetDevice(i));
    body(i);
  }
  CHECK_NCCL(ncclGroupEnd());
  sync_all(g);
  stage("capture");
  std::vector<cudaGraphExec_t> exec(size_t(g.n));
  for (int i = 0; i < g.n; ++i) {
    CHECK_CUDA(cudaSetDevice(i));
    CHECK_CUDA(cudaStreamBeginCapture(g.streams[size_t(i)], cudaStreamCaptureModeRelaxed));
  }
  CHECK_NCCL(ncclGroupStart());
  for (int i = 0; i < g.n; ++i) {
    CHECK_CUDA(cudaSetDevice(i));
    body(i);
  }
  CHECK_NCCL(ncclGroupEnd());
  for (int i = 0; i < g.n; ++i) {
    CHECK_CUDA(cudaSetDevice(i));
    cudaGraph_t graph;
    CHECK_CUDA(cudaStreamEndCapture(g.streams[size_t(i)], &graph));
    CHECK_CUDA(cudaGraphInstantiate(&exec[size_t(i)], graph, 0));
    CHECK_CUDA(cudaGraphDestroy(graph));
  }
  const auto replay = [&](int reps) {
    for (int r = 0; r < reps; ++r)
      for (int i = 0; i < g.n; ++i) {
        CHECK_CUDA(cudaSetDevice(i));
        CHECK_CUDA(cudaGraphLaunch(exec[size_t(i)], g.streams[size_t(i)]));
      }
    sync_all(g);
  };
  stage("replay");
  replay(5);
  const auto t0 = std::chrono::steady_clock::now();
  replay(iters);
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
  for (int i = 0; i < g.n; ++i) {
    CHECK_CUDA(cudaSetDevice(i));
    CHECK_CUDA(cudaGraphExecDestroy(exec[size_t(i)]));
  }
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  int layers = 32, dim = 4096, vocab = 128256, tokens = 1, iters = 200, timeout_s = 60;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (a == "--layers") layers = v;
    else if (a == "--dim") dim = v;
    else if (a == "--vocab") vocab = v;
    else if (a == "--tokens") tokens = v;
    else if (a == "--iters") iters = v;
    else if (a == "--timeout") timeout_s = v;
    else {
      std::printf("allreduce_bench: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) std::signal(sig, on_signal);
  // Stage watchdog: a stage that takes longer than --timeout seconds is reported and the bench exits.
  std::thread([timeout_s] {
    const char* last = nullptr;
    auto since = std::chrono::steady_clock::now();
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      const char* s = g_stage.load();
      if (s != last) {
        last = s;
        since = std::chrono::steady_clock::now();
      } else if (std::chrono::steady_clock::now() - since > std::chrono::seconds(timeout_s)) {
        std::printf("allreduce_bench: FAILED: stage '%s' did not finish within %d s (hang)\n", s, timeout_s);
        std::fflush(stdout);
        _exit(1);
      }
    }
  }).detach();

  Gpus g;
  stage("cudaGetDeviceCount");
  CHECK_CUDA(cudaGetDeviceCount(&g.n));
  if (g.n < 2) {
    std::printf("allreduce_bench: %d GPU(s): nothing to measure\n", g.n);
    return 0;
  }
  const int calls = 2 * layers + 1;
  const size_t hidden = size_t(tokens) * size_t(dim);                       // f32 per step all-reduce
  const size_t part = size_t(tokens) * size_t((vocab + g.n - 1) / g.n + 1);  // f32 logits per rank
  const size_t max_elems = std::max(hidden, ferry::PeerAllReduce::kMaxBytes / 4);
  stage("ncclCommInitAll");
  g.comms.resize(size_t(g.n));
  std::vector<int> devs(size_t(g.n));
  for (int i = 0; i < g.n; ++i) devs[size_t(i)] = i;
  CHECK_NCCL(ncclCommInitAll(g.comms.data(), g.n, devs.data()));
  stage("allocations");
  g.streams.resize(size_t(g.n));
  g.x.resize(size_t(g.n));
  g.logits.resize(size_t(g.n));
  for (int i = 0; i < g.n; ++i) {
    CHECK_CUDA(cudaSetDevice(i));
    CHECK_CUDA(cudaStreamCreateWithFlags(&g.streams[size_t(i)], cudaStreamNonBlocking));
    CHECK_CUDA(cudaMalloc(&g.x[size_t(i)], max_elems * 4));
    CHECK_CUDA(cudaMalloc(&g.logits[size_t(i)], part * size_t(g.n) * 4));
    CHECK_CUDA(cudaMemset(g.x[size_t(i)], 0, max_elems * 4));  // sums of zeros stay finite over the replays
    CHECK_CUDA(cudaMemset(g.logits[size_t(i)], 0, part * size_t(g.n) * 4));
  }
  const bool peer_ok = g.n <= ferry::PeerAllReduce::kMaxWorld;
  if (peer_ok) {
    stage("peer all-reduce setup");
    try {
      for (auto [group, protocol] : {std::pair{&g.peer, ferry::PeerProtocol::kLamport},
                                     std::pair{&g.peer_flags, ferry::PeerProtocol::kFlags}}) {
        for (int i = 0; i < g.n; ++i) {
          CHECK_CUDA(cudaSetDevice(i));
          group->push_back(std::make_unique<ferry::PeerAllReduce>(i, g.n, ferry::PeerAllReduce::kMaxBytes, protocol));
        }
        std::vector<ferry::PeerAllReduce*> all;
        for (auto& p : *group) all.push_back(p.get());
        for (int i = 0; i < g.n; ++i) {
          CHECK_CUDA(cudaSetDevice(i));
          (*group)[size_t(i)]->connect_local(all);
        }
      }
    } catch (const std::exception& e) {
      std::printf("allreduce_bench: FAILED: peer all-reduce setup: %s\n", e.what());
      return 1;
    }
  }
  std::printf("allreduce_bench: %d GPUs; per call = graph of %d calls / %d\n", g.n, calls, calls);
  std::printf("%-10s %12s %14s %12s\n", "bytes", "nccl us", "lamport us", "flags us");
  for (size_t bytes = 8 << 10; bytes <= ferry::PeerAllReduce::kMaxBytes; bytes *= 2) {
    const size_t elems = bytes / 4;
    const auto per_call = [&](Kind kind) {
      if (kind != Kind::Nccl && !peer_ok) return -1.0;
      return time_graph(g, [&](int i) { enqueue(g, i, kind, elems, calls); }, iters) / calls;
    };
    const double nccl = per_call(Kind::Nccl), lamport = per_call(Kind::Peer), flags = per_call(Kind::PeerFlags);
    std::printf("%-10zu %12.2f %14.2f %12.2f\n", bytes, nccl, lamport, flags);
  }
  for (Kind kind : {Kind::Nccl, Kind::Peer, Kind::PeerFlags}) {
    if (kind != Kind::Nccl && (!peer_ok || !g.peer[0]->fits(hidden))) continue;
    const double us = time_graph(
        g,
        [&](int i) {
          enqueue(g, i, kind, hidden, calls);
          CHECK_NCCL(ncclAllGather(g.logits[size_t(i)] + part * size_t(i), g.logits[size_t(i)], part, ncclFloat32,
                                   g.comms[size_t(i)], g.streams[size_t(i)]));
        },
        iters);
    std::printf("allreduce_bench: %d GPUs, %d layers, dim %d, %d token(s): %d %s all-reduces of %zu B + NCCL "
                "all-gather of %zu B per rank: %.1f us per step\n",
                g.n, layers, dim, tokens, calls, kind_name(kind), hidden * 4, part * 4, us);
  }
  stage("teardown");
  g.peer.clear();
  g.peer_flags.clear();
  for (int i = 0; i < g.n; ++i) ncclCommDestroy(g.comms[size_t(i)]);
  std::printf("allreduce_bench: done\n");
  return 0;
}
