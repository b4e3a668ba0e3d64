// The fault probe behind the dist_timeout tests (check_timeout.sh): two ranks
// build a communicator with a 2 s timeout; rank 0 starts an all_reduce and
// waits for it, rank 1 never joins (a stuck peer) and sleeps far longer. The
// job must end within seconds, with rank 0's one-line message and a non-zero
// exit, instead of hanging.
//   dist_timeout_probe cpu    MPI backend: Work::wait() times out
//   dist_timeout_probe cuda   NCCL backend: the watchdog times out (rank 0's
//                             host blocks in a device synchronisation)
#include <torch/cuda.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "runtime/comm/communicator.hpp"

namespace rt = planner::rt;

int main(int argc, char** argv) {
  const std::string dev = argc > 1 ? argv[1] : "cpu";
  const auto w = rt::init_world();
  if (w.size != 2) {
    std::fprintf(stderr, "dist_timeout_probe: run with 2 ranks (got %d)\n", w.size);
    return 2;
  }
  at::Device device(at::kCPU);
  if (dev == "cuda") {
    if (!rt::has_nccl() || static_cast<int>(torch::cuda::device_count()) < w.local_size) {
      if (w.rank == 0) std::printf("skip: needs NCCL and one GPU per rank\n");
      return 0;
    }
    device = at::Device(at::kCUDA, static_cast<at::DeviceIndex>(w.local_rank));
  }
  auto c = rt::make_communicator({{0, 1}}, "world", device, std::chrono::seconds(2));
  c->barrier();  // both ranks are up and the communicator works
  if (w.rank == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(120));
    return 0;
  }
  at::Tensor t = at::ones({1024}, at::TensorOptions(at::kFloat).device(device));
  c->all_reduce(t)->wait();
  if (device.is_cuda()) torch::cuda::synchronize();
  std::fprintf(stderr, "dist_timeout_probe: rank 0's all_reduce finished without its peer\n");
  return 0;
}
