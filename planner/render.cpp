#include "planner/render.hpp"

#include <fmt/format.h>

#include "planner/cli.hpp"
#include "strategies/parse_util.hpp"

namespace planner {

namespace {

// "79.18 GiB" or, with a headroom, "77.60 GiB usable (79.18 GiB less 1.58 GiB headroom)".
std::string usable_text(const MemoryReport& r) {
  if (r.gpu_headroom_bytes <= 0) return format_bytes(double(r.gpu_capacity_bytes));
  return fmt::format("{} usable ({} less {} headroom)", format_bytes(double(r.gpu_usable_bytes())),
                     format_bytes(double(r.gpu_capacity_bytes)), format_bytes(double(r.gpu_headroom_bytes)));
}

}  // namespace

std::string why_not_fits(const MemoryReport& r) {
  if (r.fits()) return "fits";
  std::string out;
  if (!r.gpu_fits) {
    const auto& peak = r.peak_breakdown();
    out = fmt::format("GPU peak {} exceeds the GPU's {} by {} (stage {}); largest category: {} {}",
                      format_bytes(double(r.per_gpu_peak_bytes)), usable_text(r),
                      format_bytes(double(r.per_gpu_peak_bytes - r.gpu_usable_bytes())), r.peak_stage,
                      to_string(r.binding), format_bytes(double(peak[int(r.binding)])));
  }
  if (!r.host_fits) {
    if (!out.empty()) out += "; ";
    // The host need is each process's own memory (LibTorch, the CUDA context)
    // plus, with offload, the states kept there: name what is in it.
    bool offloaded = false;
    for (const auto& sm : r.stages) offloaded = offloaded || sm.host_bytes > 0;
    out += fmt::format("host memory {} exceeds the node's {} by {} ({})",
                       format_bytes(double(r.host_peak_bytes)), format_bytes(double(r.host_capacity_bytes)),
                       format_bytes(double(r.host_peak_bytes - r.host_capacity_bytes)),
                       offloaded ? "offloaded states and each process's own memory" : "each process's own memory");
  }
  return out;
}

std::string plan_header(const Plan& p) {
  return fmt::format("Model {} ({} parameters) on {} ({}x {}, {} each), seq {}, global batch {}\nCluster {}\n"
                     "Strategy {}\n",
                     p.model.name, format_count(double(p.model.total_params())), p.cluster.name, p.cluster.world(),
                     p.cluster.gpu.name, format_bytes(double(p.cluster.gpu.memory_bytes)), p.seq, p.global_batch,
                     topology_line(p.cluster), p.strategy.to_string());
}

GivenInputs given_inputs(const PlanOptions& o) {
  GivenInputs g;
  const bool file = !o.plan_path.empty();
  g.seq = file || !o.seq.empty();
  g.global_batch = file || !o.global_batch.empty();
  g.host_memory = file || !o.host_memory.empty();
  return g;
}

std::string memory_table(const Plan& plan, const MemoryReport& r) {
  std::string out;
  if (r.engine != Engine::Ours)
    out += fmt::format("Memory as {} allocates it (--engine {})\n", engine_version(r.engine), to_string(r.engine));
  const int n = int(r.stages.size());
  out += fmt::format("{:<20}", "per GPU");
  for (const auto& s : r.stages) out += fmt::format("{:>14}", n == 1 ? std::string("all ranks") : fmt::format("stage {}", s.stage));
  out += "\n";
  out += fmt::format("{:<20}", "  layers");
  for (const auto& s : r.stages) {
    std::string extra = std::string(s.has_embedding ? "E" : "") + (s.has_head ? "H" : "");
    out += fmt::format("{:>14}", fmt::format("{}{}", s.layers, extra.empty() ? "" : "+" + extra));
  }
  out += "\n";
  out += fmt::format("{:<20}", "  in-flight mb");
  for (const auto& s : r.stages) out += fmt::format("{:>14}", s.inflight_microbatches);
  out += "\n";
  for (int c = 0; c < kMemCategories; ++c) {
    out += fmt::format("{:<20}", fmt::format("  {}", to_string(MemCategory(c))));
    for (const auto& s : r.stages) out += fmt::format("{:>14}", format_bytes(double(s.gpu[c])));
    out += "\n";
  }
  out += fmt::format("{:<20}", "  peak");
  for (const auto& s : r.stages) out += fmt::format("{:>14}", format_bytes(double(s.gpu_peak_bytes)));
  out += "\n";
  const double free_bytes = double(r.gpu_usable_bytes() - r.per_gpu_peak_bytes);
  out += fmt::format("GPU: peak {} on stage {}, {:.1f}% of the {} a process can allocate; {} {}{}\n",
                     format_bytes(double(r.per_gpu_peak_bytes)), r.peak_stage,
                     100.0 * double(r.per_gpu_peak_bytes) / double(r.gpu_capacity_bytes),
                     format_bytes(double(r.gpu_capacity_bytes)), free_bytes >= 0 ? "free" : "short by",
                     format_bytes(std::abs(free_bytes)),
                     r.gpu_headroom_bytes > 0 ? fmt::format(" after the {} headroom", format_bytes(double(r.gpu_headroom_bytes)))
                                              : std::string());
  out += fmt::format("Host: {} of {} per node ({} processes)\n", format_bytes(double(r.host_peak_bytes)),
                     format_bytes(double(r.host_capacity_bytes)), plan.cluster.gpus_per_node);
  out += r.fits() ? "Verdict: FITS\n" : fmt::format("Verdict: DOES NOT FIT: {}\n", why_not_fits(r));
  for (const auto& note : r.notes) out += fmt::format("Note: {}\n", note);
  return out;
}

}  // namespace planner
