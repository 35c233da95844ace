#ifdef FERRY_HAS_NCCL

#include "parallel/nccl_communicator.h"

#include <cstdio>
#include <cstring>

#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include "core/check.h"

namespace ferry {
namespace {

constexpr std::chrono::seconds kTeardownGrace{10};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void check_nccl(ncclResult_t r, const char* what) {
  FERRY_CHECK(r == ncclSuccess || r == ncclInProgress, "NCCL {} failed: {} ({})", what, ncclGetErrorString(r),
              ncclGetLastError(nullptr) ? ncclGetLastError(nullptr) : "");
}

}  // namespace

NcclCommunicator::NcclCommunicator(const NcclCommunicatorOptions& o)
    : link_(o.link), stream_(o.stream), timeout_(o.timeout) {
  FERRY_ASSERT(link_ != nullptr && stream_ != nullptr);
  // The link's reader threads report a peer's abort notice or death at once, even while this rank waits in a
  // collective.
  link_->set_on_failure([this](const std::string& why) { die(why); });
  ncclUniqueId id{};
  std::vector<uint8_t> bytes;
  if (rank() == 0) {
    check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    bytes.assign(reinterpret_cast<const uint8_t*>(&id), reinterpret_cast<const uint8_t*>(&id) + sizeof(id));
  }
  link_->broadcast(bytes);
  FERRY_CHECK(bytes.size() == sizeof(id), "tensor-parallel rank {}: bad NCCL id message ({} bytes)", rank(), bytes.size());
  std::memcpy(&id, bytes.data(), sizeof(id));
  ncclComm_t comm = nullptr;
  check_nccl(ncclCommInitRank(&comm, world(), id, rank()), "ncclCommInitRank");
  comm_ = comm;
  watchdog_ = std::thread([this] { watch(); });
}

NcclCommunicator::~NcclCommunicator() {
  // Teardown may wait on a peer (ncclCommDestroy finalizes with the other ranks): seen on the 2-GPU machine,
  // where every rank printed its results and then never exited (and with torch, ../shared/GPU.md). Suspected
  // cause: rank 0's decode graphs, holding NCCL kernels, outlived the communicator (engine/tp_setup now drops
  // them first; not yet re-run on the device). The steps are done by now, so a rank still tearing down after
  // kTeardownGrace says so and exits.
  std::thread([rank = rank(), failed = failed_.load()] {
    std::this_thread::sleep_for(kTeardownGrace);
    std::fflush(stdout);
    std::fprintf(stderr, "ferry: tensor-parallel rank %d: teardown still waiting after %lld s; exiting\n", rank,
                 static_cast<long long>(kTeardownGrace.count()));
    std::fflush(stderr);
    _exit(failed ? 3 : 0);
  }).detach();
  stop_ = true;
  if (watchdog_.joinable()) watchdog_.join();
  link_->set_on_failure(nullptr);
  if (comm_) {
    if (failed_) {
      ncclCommAbort(comm_);
    } else {
      ncclCommDestroy(comm_);
    }
  }
}

void NcclCommunicator::all_reduce_sum(const Tensor& x) {
  FERRY_ASSERT(x.dtype == DType::F32 && x.device == Device::Cuda);
  FERRY_CHECK(!failed_, "{}", failure_);
  if (small_ && small_(static_cast<float*>(x.data), size_t(x.numel()), stream_)) return;
  check_nccl(ncclAllReduce(x.data, x.data, size_t(x.numel()), ncclFloat32, ncclSum, comm_, stream_), "all-reduce");
}

void NcclCommunicator::all_gather_inplace(const Tensor& buf) {
  FERRY_ASSERT(buf.dtype == DType::F32 && buf.device == Device::Cuda && buf.numel() % world() == 0);
  FERRY_CHECK(!failed_, "{}", failure_);
  const size_t part = size_t(buf.numel()) / size_t(world());
  const float* mine = static_cast<const float*>(buf.data) + part * size_t(rank());
  check_nccl(ncclAllGather(mine, buf.data, part, ncclFloat32, comm_, stream_), "all-gather");
}

void NcclCommunicator::broadcast(std::vector<uint8_t>& bytes) {
  link_->broadcast(bytes);
  step_started_ns_ = bytes.empty() ? 0 : now_ns();  // a step begins (an empty message ends the group)
}

void NcclCommunicator::step_done() { step_started_ns_ = 0; }

void NcclCommunicator::barrier() { link_->barrier(); }

void NcclCommunicator::abort(const std::string& why) noexcept {
  const std::string msg = fmt::format("tensor-parallel rank {} failed: {}", rank(), why);
  {
    std::lock_guard lock(fail_mu_);
    if (failed_) return;
    failed_ = true;
    failure_ = msg;
  }
  link_->set_on_failure(nullptr);  // the peers' exits that follow must not end this rank before it reports
  link_->send_abort(msg);
  if (comm_) ncclCommAbort(comm_);
  comm_ = nullptr;
}

void NcclCommunicator::die(const std::string& why) noexcept {
  std::fprintf(stderr, "ferry: tensor-parallel rank %d: %s; ending this rank\n", rank(), why.c_str());
  std::fflush(stderr);
  link_->send_abort(why);
  // ncclCommAbort may itself wait on a wedged peer: exit regardless after a grace period.
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::seconds(5));
    _exit(3);
  }).detach();
  if (comm_) ncclCommAbort(comm_);
  _exit(3);
}

void NcclCommunicator::watch() {
  while (!stop_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (failed_ || !comm_) continue;
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress)
      die(fmt::format("NCCL error: {}", ncclGetErrorString(async)));
    const int64_t started = step_started_ns_;
    if (started != 0 && now_ns() - started > std::chrono::nanoseconds(timeout_).count())
      die(fmt::format("a step did not finish within {} s (FERRY_TP_TIMEOUT): another rank is stuck or gone",
                      timeout_.count()));
  }
}

}  // namespace ferry

#endif  // FERRY_HAS_NCCL
