// A kernel timeline for any CUDA program, without changing it: a CUPTI injection library.
//
//   CUDA_INJECTION64_PATH=/path/libferry_kernel_trace.so FERRY_KERNEL_TRACE=trace.csv ferry bench ...
//
// "%p" in FERRY_KERNEL_TRACE becomes the process id (one file per rank of a --tp run).
//
// The CUDA driver loads the library named by CUDA_INJECTION64_PATH when the program first initializes CUDA and
// calls its InitializeInjection(). From then on CUPTI records every kernel (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
// kernels keep running concurrently, PDL overlap included; kernels replayed from a CUDA graph carry the graph's id
// and the correlation id of the cudaGraphLaunch that ran them). At exit the records are written as CSV, one row a
// kernel: correlation id, graph id, graph node id, start and end (GPU ns), stream, grid, block, dynamic shared
// memory, registers, and the demangled name. scripts/device/trace_summary.py turns them into a per-step table
// (which kernel holds the step's critical path, and for how long). nsys is not on the lent machine; this is
// what stands in for its timeline.
//
// State: CUPTI's buffer callbacks take no user pointer, so the records live in one file-static object owned by
// this library (the one place in ferry where the API leaves no other choice).
#include <cupti.h>

#include <cxxabi.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct KernelRecord {
  uint32_t correlation_id, graph_id, stream_id, registers;
  uint64_t graph_node_id, start_ns, end_ns;
  int32_t grid_x, grid_y, grid_z, block_x, dynamic_smem;
  std::string name;
};

struct TraceState {
  std::mutex mutex;
  std::vector<KernelRecord> records;
  uint64_t dropped = 0;
  std::string path;
};

TraceState& state() {
  static TraceState* s = new TraceState();  // never destroyed: CUPTI may deliver buffers during exit
  return *s;
}

constexpr size_t kBufferBytes = 8u << 20;

void report(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  std::fprintf(stderr, "kernel_trace: %s failed: %s\n", what, msg ? msg : "?");
}

std::string demangle(const char* mangled) {
  if (!mangled) return "?";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  return status == 0 && d ? std::string(d.get()) : std::string(mangled);
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_size) {
  TraceState& s = state();
  std::vector<KernelRecord> batch;
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid_size, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    batch.push_back({k->correlationId, k->graphId, k->streamId, k->registersPerThread, k->graphNodeId, k->start,
                     k->end, k->gridX, k->gridY, k->gridZ, k->blockX, k->dynamicSharedMemory, demangle(k->name)});
  }
  size_t dropped = 0;
  cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped);
  std::free(buffer);
  std::lock_guard<std::mutex> lock(s.mutex);
  s.records.insert(s.records.end(), std::make_move_iterator(batch.begin()), std::make_move_iterator(batch.end()));
  s.dropped += dropped;
}

// Names carry commas (template arguments): quote them for CSV.
std::string csv_quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

void write_trace() {
  report(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  TraceState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::FILE* f = std::fopen(s.path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "kernel_trace: cannot write %s\n", s.path.c_str());
    return;
  }
  std::fprintf(f, "correlation_id,graph_id,graph_node_id,start_ns,end_ns,stream,grid_x,grid_y,grid_z,block_x,"
                  "dynamic_smem,registers,name\n");
  for (const KernelRecord& r : s.records)
    std::fprintf(f, "%u,%u,%llu,%llu,%llu,%u,%d,%d,%d,%d,%d,%u,%s\n", r.correlation_id, r.graph_id,
                 static_cast<unsigned long long>(r.graph_node_id), static_cast<unsigned long long>(r.start_ns),
                 static_cast<unsigned long long>(r.end_ns), r.stream_id, r.grid_x, r.grid_y, r.grid_z, r.block_x,
                 r.dynamic_smem, r.registers, csv_quoted(r.name).c_str());
  std::fclose(f);
  std::fprintf(stderr, "kernel_trace: %zu kernels (%llu records dropped) -> %s\n", s.records.size(),
               static_cast<unsigned long long>(s.dropped), s.path.c_str());
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  const char* path = std::getenv("FERRY_KERNEL_TRACE");
  std::string p = path && *path ? path : "ferry-kernel-trace.csv";
  for (size_t at = p.find("%p"); at != std::string::npos; at = p.find("%p", at))
    p.replace(at, 2, std::to_string(getpid()));
  state().path = p;
  report(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
  report(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable(CONCURRENT_KERNEL)");
  std::atexit(write_trace);
  return 1;
}
