// One-shot all-reduce over peer memory for small f32 messages (a decode step's hidden states: up to
// kMaxBytes), the custom all-reduce of vLLM / TensorRT-LLM written for ferry. One kernel per call, no host
// involvement, capturable in a CUDA graph. Each block b of every rank pushes its chunk of x into slot
// [set][rank] of every peer's buffer (NVLink stores), waits until every peer's chunk b of this call is in its
// own buffer, and sums the slots in rank order 0..world-1 (its own values from x): the same bits on every rank.
// How a rank knows a peer's chunk has landed (PeerProtocol):
//
//   kLamport (default): the values themselves. Every slot holds -0.0f (the sentinel) until a peer writes it;
//   pushed values are canonicalized (x + 0.0f turns -0.0 into +0.0, nothing else changes), so a value that is
//   not the sentinel has landed. The reader polls its slot until no value is the sentinel, then writes the
//   sentinel back (its own memory) for the call two later. One NVLink crossing on the critical path.
//   kFlags: the block fences at system scope (its stores acknowledged) and sets flag [set][rank][b] = gen in
//   every peer's buffer (st.release.sys); the reader waits for the flag (ld.acquire.sys), then reads the slot:
//   a fence round trip, a flag crossing and a read after the data's crossing.
//
// gen is a call counter kept in device memory (the last block of a call to finish advances it), so a replayed
// graph sees a new value every call. Two buffer sets (set = gen & 1) alternate: a rank can run at most one call
// ahead of a peer (it needs the peer's values of the call before), so it never overwrites a slot the peer still
// reads; under kLamport a slot is cleared by its reader before the reader's next call pushes anything, so it
// holds the sentinel again before any peer can write it two calls later.
//
// No timeout in the kernel: a dead or stuck peer leaves the kernel spinning, and the communicator's watchdog
// (parallel/nccl_communicator: the link sees the death, or the step outlives FERRY_TP_TIMEOUT) prints why and exits
// the process, which ends the kernel with it.
//
// Buffers: one cudaMalloc per rank, shared with the other processes through cudaIpcMemHandle_t (open_ipc) or,
// for one process driving every GPU (bench, tests), through plain device pointers (connect_local).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

struct CUstream_st;

namespace ferry {

enum class PeerProtocol { kLamport, kFlags };

class PeerAllReduce {
 public:
  static constexpr size_t kMaxBytes = size_t(512) << 10;  // 32 tokens x 4096 f32
  static constexpr int kMaxWorld = 8;

  // Allocates and initializes this rank's buffer on the current device (synchronously). Every rank of a group
  // must use the same protocol.
  PeerAllReduce(int rank, int world, size_t max_bytes = kMaxBytes, PeerProtocol protocol = PeerProtocol::kLamport);
  ~PeerAllReduce();
  PeerAllReduce(const PeerAllReduce&) = delete;
  PeerAllReduce& operator=(const PeerAllReduce&) = delete;

  int rank() const { return rank_; }
  PeerProtocol protocol() const { return protocol_; }
  int world() const { return world_; }
  // True when a message of n f32 values goes through this all-reduce (else the caller uses NCCL).
  bool fits(size_t n) const { return n > 0 && n <= max_elems_; }

  // This rank's buffer as cudaIpcMemHandle_t bytes, for the other processes.
  std::vector<uint8_t> ipc_handle() const;
  // Every rank's ipc_handle() in rank order (this rank's own entry is not opened). Call once.
  void open_ipc(const std::vector<std::vector<uint8_t>>& handles);
  // One process, every rank's object (rank order), each made with its own device current; enables peer
  // access between the devices. Call once on every object.
  void connect_local(const std::vector<PeerAllReduce*>& ranks);

  // x: [n] f32, contiguous, in this rank's device memory; replaced by the sum over ranks. Enqueued on stream
  // (the device current at construction must be current). Every rank must make the same sequence of calls.
  void run(float* x, size_t n, CUstream_st* stream);

  // run() on delta fused with the residual add and RMSNorm that follow it, one row per block:
  //   delta += the other ranks' delta (rank order); residual += delta; out = residual / rms(residual) * weight.
  // delta, residual, out: [rows, cols] f32 row-major; weight: [cols] f32; all 16-byte aligned, in this rank's
  // device memory. Same call-sequence rule as run() (the two share the call counter).
  // pushed (kLamport only): the kernel that wrote delta also stored it into the peers' slots of this call
  // (push_target(), MatvecParams::peer_push), so this call only polls for the peers' values.
  static constexpr int64_t kNormMaxCols = 8192;
  bool fits_add_rms_norm(int64_t rows, int64_t cols) const;
  void run_add_rms_norm(float* delta, float* residual, float* out, const float* weight, int64_t rows, int64_t cols,
                        float eps, CUstream_st* stream, bool pushed = false);

  // Where a kernel pushes this rank's values of the next call itself (kLamport): per rank q, q's slot of this rank
  // in set 0 as mapped on this device (null for this rank), the floats between the two sets, and this rank's
  // call counter (the next call's set is (*counter + 1) & 1 once the previous call has completed).
  struct PushTarget {
    float* slot[kMaxWorld] = {};
    int64_t set_stride = 0;
    const uint32_t* counter = nullptr;
  };
  PushTarget push_target() const;

  // Diagnostics (FERRY_CUDA_STAMPS): block 0 of every later call writes the global timer at its phase points
  // (entry, the PDL wait released, inputs and call counter read, pushed, every peer's values in, done) into a
  // ring of the last kPhaseCalls calls; phase_report() gives each phase's median over them (synchronizes).
  static constexpr int kPhaseCalls = 1024;
  void record_phases();
  std::string phase_report() const;

 private:
  int rank_, world_, device_ = 0;
  PeerProtocol protocol_;
  void* phases_ = nullptr;            // [kPhaseCalls][8] u64 global-timer ns (slot 7: which kernel), or null
  size_t max_elems_;                  // f32 values per slot
  void* buffer_ = nullptr;            // this rank's: data [2][world][max_elems] f32 (kLamport: the sentinel where
                                      // no value waits), flags [2][world][kMaxBlocks] u32 (kFlags), call counter
                                      // u32, blocks-done u32
  std::vector<void*> peers_;          // [world] every rank's buffer as seen from this device (own: buffer_)
  std::vector<void*> opened_;         // ipc-opened pointers to close
  bool connected_ = false;
};

}  // namespace ferry
