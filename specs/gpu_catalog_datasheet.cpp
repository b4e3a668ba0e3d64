// GPU catalog, second part: the GPUs people rent today and the accelerators of
// the benchmarks this project started from. Datasheet figures only: none of
// these has been measured by this project, so `calibrated` stays empty and
// gemm_efficiency 0.7 / memory_efficiency 0.8 are assumptions (as for the
// RTX 4090 and L40S in gpu_catalog.cpp). Peaks are dense; where a datasheet
// gives a tensor rate only with structured sparsity, the dense value here is
// half of it, and the comment says so.
//
// Interconnects other than NVLink (AMD Infinity Fabric) are modelled as an
// NVLink-class peer link of the datasheet's bandwidth per direction; links not
// modelled (Huawei HCCS, Iluvatar's) leave the GPU on PCIe, which is
// pessimistic for them.
#include "specs/gpu_catalog_datasheet.hpp"

#include <string>

namespace planner {

namespace {

constexpr double GB = 1e9;
constexpr double TF = 1e12;
constexpr int64_t GiB = int64_t{1} << 30;

struct Entry {
  const char* name;
  std::vector<std::string> aliases;
  double mem_gib, bw_GBps, fp32, tf32, fp16, bf16;
  double peer_GBps;  // per direction, all links together; 0: no peer link (PCIe)
  LinkKind peer, pcie;
  IntraNode intra;
  int per_node;
  bool prediction_only;
  const char* source;
};

}  // namespace

void add_datasheet_gpus(std::vector<GpuSpec>& c) {
  const std::vector<Entry> entries = {
      // NVIDIA DGX B200 / HGX B200 datasheets give 8-GPU totals: 1,440 GB HBM3e,
      // 64 TB/s, FP16/BF16 36 PFLOPS and TF32 18 PFLOPS *with sparsity*, FP32
      // 600 TFLOPS. Per GPU: 180 GB, 8 TB/s, bf16/fp16 2.25 PF dense (half of
      // 4.5 sparse), tf32 1.125 PF dense (half of 2.25 sparse), fp32 75 TF.
      // NVLink5 1.8 TB/s total per GPU = 900 GB/s per direction, modelled as an
      // NVLink4-class link of that bandwidth. PCIe Gen5 to the host.
      {"B200", {"b200-sxm", "b200-180gb", "hgx-b200"}, 180, 8000, 75, 1125, 2250, 2250, 900, LinkKind::NVLink4,
       LinkKind::PCIe5, IntraNode::NVSwitch, 8, false,
       "NVIDIA DGX B200 / HGX B200 datasheets (8-GPU totals divided by 8; tensor rates dense = half of sparse)"},
      // NVIDIA H20 (Hopper for the China market), HGX H20 specifications:
      // 96 GB HBM3 at 4.0 TB/s, fp32 44, tf32 74, bf16/fp16 148 TF dense, NVLink
      // 900 GB/s total (450 per direction), PCIe Gen5.
      {"H20", {"h20-96gb", "hgx-h20"}, 96, 4000, 44, 74, 148, 148, 450, LinkKind::NVLink4, LinkKind::PCIe5,
       IntraNode::NVSwitch, 8, false, "NVIDIA HGX H20 product specifications"},
      // NVIDIA L4 datasheet: 24 GB GDDR6 at 300 GB/s, fp32 30.3 TF; tf32 120 and
      // bf16/fp16 242 TF are given with sparsity: dense 60 and 121. PCIe Gen4,
      // no NVLink.
      {"L4", {"l4-24gb", "nvidia-l4"}, 24, 300, 30.3, 60, 121, 121, 0, LinkKind::PCIe4, LinkKind::PCIe4,
       IntraNode::PCIe, 8, false, "NVIDIA L4 Tensor Core GPU datasheet (tensor rates dense = half of sparse)"},
      // NVIDIA L40 datasheet: 48 GB GDDR6 at 864 GB/s, fp32 90.5 TF, tf32 90.5
      // dense (181 sparse), bf16/fp16 181.05 dense (362.1 sparse). PCIe Gen4.
      {"L40", {"l40-48gb"}, 48, 864, 90.5, 90.5, 181.05, 181.05, 0, LinkKind::PCIe4, LinkKind::PCIe4,
       IntraNode::PCIe, 8, false, "NVIDIA L40 datasheet"},
      // NVIDIA A10 datasheet: 24 GB GDDR6 at 600 GB/s, fp32 31.2, tf32 62.5
      // dense (125 sparse), bf16/fp16 125 dense (250 sparse). PCIe Gen4.
      {"A10", {"a10-24gb", "nvidia-a10"}, 24, 600, 31.2, 62.5, 125, 125, 0, LinkKind::PCIe4, LinkKind::PCIe4,
       IntraNode::PCIe, 4, false, "NVIDIA A10 Tensor Core GPU datasheet"},
      // NVIDIA T4 datasheet (Turing): 16 GB GDDR6 at 320 GB/s, fp32 8.1 TF,
      // mixed precision (fp16 with fp32 accumulate) 65 TF; no bf16, no tf32.
      // PCIe Gen3.
      {"T4", {"t4-16gb", "tesla-t4"}, 16, 320, 8.1, 0, 65, 0, 0, LinkKind::PCIe3, LinkKind::PCIe3, IntraNode::PCIe,
       4, false, "NVIDIA T4 Tensor Core GPU datasheet"},
      // NVIDIA A40 datasheet: 48 GB GDDR6 at 696 GB/s, fp32 37.4, tf32 74.8
      // dense (149.6 sparse), bf16/fp16 149.7 dense (299.4 sparse); NVLink
      // bridge 112.5 GB/s total (56.25 per direction) for pairs; PCIe Gen4.
      {"A40", {"a40-48gb", "nvidia-a40"}, 48, 696, 37.4, 74.8, 149.7, 149.7, 56.25, LinkKind::NVLink3,
       LinkKind::PCIe4, IntraNode::NVLinkPairs, 2, false, "NVIDIA A40 datasheet"},
      // AMD Instinct MI300X datasheet: 192 GB HBM3 at 5.3 TB/s; fp32 (matrix)
      // 163.4, tf32 653.7, fp16/bf16 1307.4 TF dense (twice that with
      // sparsity); 7 Infinity Fabric links of 128 GB/s (bidirectional) = 448
      // GB/s per direction, modelled as an NVSwitch-like node of 8 (the OAM
      // platform is a full mesh: a real ring gets less). PCIe Gen5. ROCm, not
      // CUDA: prediction only.
      {"MI300X", {"mi300x-192gb", "instinct-mi300x", "amd-mi300x"}, 192, 5300, 163.4, 653.7, 1307.4, 1307.4, 448,
       LinkKind::NVLink4, LinkKind::PCIe5, IntraNode::NVSwitch, 8, true,
       "AMD Instinct MI300X accelerator datasheet (Infinity Fabric modelled as an NVLink-class link)"},
      // AMD Instinct MI250X datasheet (per OAM package of two GCDs: 128 GB HBM2e
      // at 3.2768 TB/s, fp32 matrix 95.7, fp16/bf16 383 TF; no tf32). Software
      // sees each GCD as one device, so an entry here is one GCD: 64 GB, 1638.4
      // GB/s, fp32 47.85, fp16/bf16 191.5. Infinity Fabric: 8 links of 100 GB/s
      // per package; 100 GB/s per direction per GCD assumed. PCIe Gen4.
      // Prediction only (ROCm).
      {"MI250X", {"mi250x-gcd", "instinct-mi250x", "amd-mi250x"}, 64, 1638.4, 47.85, 0, 191.5, 191.5, 100,
       LinkKind::NVLink3, LinkKind::PCIe4, IntraNode::NVSwitch, 8, true,
       "AMD Instinct MI250X accelerator datasheet (package figures halved per GCD)"},
      // Iluvatar CoreX BI-V100 (Tiangai 100) product page: 32 GB HBM2 at 1.2
      // TB/s, fp32 37 TF, fp16/bf16 147 TF; no tf32 figure published. Its
      // card-to-card link is not modelled (PCIe Gen4). Prediction only.
      {"BI-V100", {"biv100", "iluvatar-bi-v100", "tiangai-100"}, 32, 1200, 37, 0, 147, 147, 0, LinkKind::PCIe4,
       LinkKind::PCIe4, IntraNode::PCIe, 8, true, "Iluvatar CoreX BI-V100 (Tiangai 100) product specifications"},
      // Huawei Ascend 910 (Hot Chips 31, 2019; Atlas 300T training card): 32 GB
      // HBM2 at 1.2 TB/s, fp16 256 TF (cube unit); no bf16 (910B adds it), no
      // fp32 matrix figure published: the 16 TF fp32 here is a placeholder
      // (1/16 of fp16), so fp32 predictions for it mean nothing. HCCS links
      // not modelled (PCIe Gen4). Prediction only (CANN, not CUDA).
      {"Ascend910", {"ascend-910", "huawei-ascend-910", "atlas-300t"}, 32, 1200, 16, 0, 256, 0, 0, LinkKind::PCIe4,
       LinkKind::PCIe4, IntraNode::PCIe, 8, true,
       "Huawei Ascend 910 (Hot Chips 31, 2019), Atlas 300T datasheet; fp32 is a placeholder"},
  };
  for (const Entry& e : entries) {
    GpuSpec g;
    g.name = e.name;
    g.aliases = e.aliases;
    g.memory_bytes = datasheet_capacity(e.mem_gib);  // datasheet less the uncalibrated margin
    g.memory_bandwidth_Bps = e.bw_GBps * GB;
    g.peak_fp32 = e.fp32 * TF;
    g.peak_tf32 = e.tf32 * TF;
    g.peak_fp16 = e.fp16 * TF;
    g.peak_bf16 = e.bf16 * TF;
    g.gemm_efficiency = 0.7;    // assumption: not measured
    g.memory_efficiency = 0.8;  // assumption
    g.has_nvlink = e.peer_GBps > 0;
    g.nvlink = e.peer_GBps > 0 ? e.peer : LinkKind::PCIe4;
    g.nvlink_bandwidth_Bps = e.peer_GBps * GB;
    g.pcie = e.pcie;
    g.default_intra = e.intra;
    g.default_gpus_per_node = e.per_node;
    g.prediction_only = e.prediction_only;
    g.source = std::string(e.source) + "; efficiencies assumed";
    // FP8 tensor cores, dense, where the catalog counts the GPU as Hopper or
    // later: HGX H20 specifications, FP8 296 TF; DGX/HGX B200 datasheets, FP8
    // 72 PF with sparsity for 8 GPUs = 4.5 PF dense per GPU. Both twice the
    // bf16 rate. (Ada and AMD parts with FP8 are left without it: the FP8
    // runtime and model are checked on Hopper only.)
    if (g.name == "H20" || g.name == "B200") g.peak_fp8 = 2 * g.peak_bf16;
    c.push_back(g);
  }
}

}  // namespace planner
