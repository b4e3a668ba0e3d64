// exec --kernels: kernel names to the time model's op classes, and the sums.
// The names are as the profiler reported them on an H100 (LibTorch 2.11, CUDA
// 13: validation/archive/h100/profile.txt) plus the other attention and cuBLAS kernels.
#include <ATen/ATen.h>

#include "runtime/kernel_profile.hpp"
#include "catch.hpp"

using namespace planner::rt;

TEST_CASE("kernel names map to the time model's op classes", "[kernels]") {
  CHECK(kernel_class("nvjet_sm90_tst_256x128_64x4_1x2_h_badd_coopA_NTT") == KernelClass::Gemm);
  CHECK(kernel_class("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1") ==
        KernelClass::Gemm);
  CHECK(kernel_class("cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_nn_align8") == KernelClass::Gemm);
  CHECK(kernel_class("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16>") == KernelClass::Gemm);
  CHECK(kernel_class("ampere_sgemm_128x64_nn") == KernelClass::Gemm);
  CHECK(kernel_class("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128") ==
        KernelClass::Attention);
  CHECK(kernel_class("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>") ==
        KernelClass::Attention);
  CHECK(kernel_class("fmha_cutlassB_f32_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel)") ==
        KernelClass::Attention);
  // The fused backward's helpers (cuDNN's, as LibTorch 2.11 runs them on an H200): attention, as the layer model prices them.
  CHECK(kernel_class("void cudnn::fusion::compute_dot_do_o_specialized<true, 128>(void const*, void const*, void*)") ==
        KernelClass::Attention);
  CHECK(kernel_class("void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*, unsigned int)") ==
        KernelClass::Attention);
  CHECK(kernel_class("void flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<128, 64, 128, 8>>") ==
        KernelClass::Attention);
  CHECK(kernel_class("void at::native::vectorized_elementwise_kernel<8, at::native::GeluBackwardCUDAKernelImpl>") ==
        KernelClass::Memory);
  CHECK(kernel_class("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float>") ==
        KernelClass::Memory);
  CHECK(kernel_class("void at::native::reduce_kernel<128, 4, at::native::ReduceOp<c10::BFloat16>>") ==
        KernelClass::Memory);
  CHECK(kernel_class("Memcpy HtoD (Pinned -> Device)") == KernelClass::HostCopy);
  CHECK(kernel_class("Memcpy DtoH (Device -> Pageable)") == KernelClass::HostCopy);
  CHECK(kernel_class("Memcpy DtoD (Device -> Device)") == KernelClass::Memory);
  CHECK(kernel_class("Memset (Device)") == KernelClass::Memory);
  CHECK(kernel_class("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)") ==
        KernelClass::Comm);
  CHECK(kernel_class("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t") == KernelClass::Comm);
  CHECK(std::string(to_string(KernelClass::Memory)) == "memory_bound");
}

TEST_CASE("kernel events sum by name and class, the span from first start to last end", "[kernels]") {
  const std::vector<KernelEvent> ev = {
      {"nvjet_a", 10.0, 0.5},       {"gelu elementwise", 10.5, 0.1}, {"nvjet_a", 10.7, 0.5},
      {"flash_fwd_kernel", 11.2, 0.3}, {"Memcpy HtoD (Pinned -> Device)", 9.9, 0.05}, {"gelu elementwise", 11.5, 0.1},
      {"ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 11.0, 0.9},  // on its own stream, past the compute's end
  };
  const KernelProfile p = summarize_kernels(ev);
  CHECK(p.recorded);
  CHECK(p.launches == 7);
  CHECK(p.comm_seconds == Approx(0.9));
  CHECK(p.gemm_seconds == Approx(1.0));
  CHECK(p.attention_seconds == Approx(0.3));
  CHECK(p.memory_seconds == Approx(0.2));
  CHECK(p.host_copy_seconds == Approx(0.05));
  CHECK(p.busy_seconds() == Approx(1.5));             // the compute kernels
  CHECK(p.span_seconds == Approx(11.6 - 10.0));        // theirs: not the copy before nor the collective after
  CHECK(p.idle_seconds() == Approx(0.1));
  REQUIRE(p.kernels.size() == 5);
  CHECK(p.kernels[0].name == "nvjet_a");
  CHECK(p.kernels[1].cls == KernelClass::Comm);
  CHECK(p.kernels[0].count == 2);
  CHECK(p.kernels[0].seconds == Approx(1.0));
  CHECK(p.kernels[2].name == "flash_fwd_kernel");
  CHECK(p.kernels[3].name == "gelu elementwise");
  CHECK(p.kernels[3].cls == KernelClass::Memory);
  CHECK(p.kernels[3].count == 2);
  const KernelProfile none = summarize_kernels({});
  CHECK(none.launches == 0);
  CHECK(none.span_seconds == 0);
}

TEST_CASE("compute kernels beside the collectives: their time inside the union and the slowdown by name",
          "[kernels]") {
  // Two collectives overlapping each other: union [2.0, 3.0] and [4.0, 4.5].
  const std::vector<KernelEvent> ev = {
      {"nvjet_a", 0.0, 0.10},         {"nvjet_a", 0.2, 0.10},  // alone: mean 0.10
      {"flash_bprop", 0.4, 0.20},                               // alone
      {"ncclDevKernel_AllReduce", 2.0, 0.6}, {"ncclDevKernel_AllReduce", 2.5, 0.5},
      {"nvjet_a", 2.1, 0.12},         {"nvjet_a", 2.3, 0.14},  // wholly beside: 0.26 s for 0.20 alone
      {"flash_bprop", 2.5, 0.30},                               // beside: 0.30 for 0.20
      {"gelu", 2.9, 0.2},             // 0.1 of 0.2 inside: neither beside nor alone for the ratio
      {"nvjet_b", 4.0, 0.2},          // only beside: counted in the time, not in the ratio
      {"ncclDevKernel_AllGather", 4.0, 0.5},
  };
  const KernelProfile p = summarize_kernels(ev);
  const BesideComm& b = p.beside;
  CHECK(b.comm_busy_seconds == Approx(1.0 + 0.5));
  CHECK(b.beside_seconds[0] == Approx(0.12 + 0.14 + 0.2));
  CHECK(b.beside_seconds[1] == Approx(0.30));
  CHECK(b.beside_seconds[2] == Approx(0.1));
  CHECK(b.compute_beside_seconds() == Approx(0.86));
  CHECK(b.matched_seconds[0] == Approx(0.26));
  CHECK(b.matched_alone_seconds[0] == Approx(0.20));
  CHECK(b.slowdown(0) == Approx(1.3));
  CHECK(b.slowdown(1) == Approx(1.5));
  CHECK(b.slowdown(2) == 0);
  CHECK(b.slowdown() == Approx((0.26 + 0.30) / (0.20 + 0.20)));
  // No collectives: nothing beside them.
  const KernelProfile q = summarize_kernels({{"nvjet_a", 0.0, 0.1}});
  CHECK(q.beside.comm_busy_seconds == 0);
  CHECK(q.beside.slowdown() == 0);
}

TEST_CASE("the recorder starts and stops LibTorch's profiler (no kernels on the CPU)", "[kernels]") {
  KernelRecorder rec;
  CHECK_THROWS(rec.stop());
  rec.start();
  CHECK_THROWS(rec.start());
  const at::Tensor a = at::ones({64, 64});
  const double s = at::mm(a, a).sum().item<double>();
  CHECK(s == 64.0 * 64 * 64);
  const KernelProfile p = rec.stop();
  CHECK(p.recorded);
  CHECK(p.launches == 0);  // CPU work records no GPU kernel, copy or memset
  rec.start();             // and again, as exec would for another plan
  CHECK(rec.stop().launches == 0);
}
