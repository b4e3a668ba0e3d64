#pragma once
// `planner calibrate`, the runtime's half: micro-benchmarks of what the
// hardware profile holds, on this process's device (the GPU when there is
// one, else the CPU), as raw measured points. Fitting the profile's fields to
// them is the cost model's job (costmodel/calibration.hpp). No LibTorch types
// here: the planner includes this header.
//
// Measured (each point: sizes and seconds, the fastest of five timings of a
// batch of calls lasting at least a few milliseconds):
//  - GEMMs over transformer shapes (the runtime's x w^T forward, data- and
//    weight-gradient layouts; gpt2-xl's unaligned 1600/4800/6400, GPT-3-like
//    2048 and 4096, a LLaMA-style GQA/SwiGLU layer; 8192^3) per precision
//    (fp32 runs on TF32, as the runtime sets it);
//  - at::scaled_dot_product_attention forward and backward (causal, a grid of
//    head dims 64, 80, 128 and sequences 1024-8192, one GQA case) in bf16,
//    fp16 and (GPU) fp32;
//  - the GEMMs and attention of eight-layer GPT-, OPT- and LLaMA-style
//    models' sustained training steps (Kineto) against the same kernels
//    timed as above (calibration/measure_in_step.cpp);
//  - the memory-bound kernel classes of the time model: vectorized streams
//    (copy, add, GeLU), non-vectorized elementwise (converting copy,
//    broadcast multiply, SiLU of a narrowed half) and reductions (layer norm,
//    column sums); the launch cost of a tiny kernel;
//  - host<->device copies, pinned and pageable, each direction (GPU only);
//    host memcpy; the CPU AdamW as the runtime's offload runs it
//    (at::_fused_adamw_ on fp32 master and moments, 16-bit gradients
//    converted chunk by chunk);
//  - memory: cudaMemGetInfo total and free after the context, the memory
//    outside the caching allocator once the GEMM/attention libraries are
//    loaded (context), the allocator's bytes with no tensor alive
//    (workspaces), what the allocator can really reserve (allocated until
//    out of memory), and the allocator's rounding on transformer-sized blocks;
//  - with several ranks (mpirun): all-reduce, reduce-scatter, all-gather,
//    broadcast and send/recv through the runtime's Communicator (NCCL on
//    GPUs, MPI on the CPU) over sizes and group sizes, the device memory
//    one NCCL communicator takes, and a GEMM and copy loop alone and beside
//    collectives on the communicator's stream. With one rank: skipped, with
//    a note.
// With several ranks, rank 0 runs the single-device benchmarks while the
// others wait (they would share the host), then every rank joins the
// collectives.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace planner::rt {

struct CalibrateOptions {
  std::string device = "auto";   // auto | cuda | cpu
  bool quick = false;            // tiny sizes (CI on the CPU; a rough GPU check)
  bool progress = true;          // one line per measurement on stderr
  int comm_timeout_seconds = 120;
  double budget_seconds = 0;     // > 0: parts not started within it are skipped, with a note
  // Non-empty: only these single-GPU parts are measured (calibration_part_names()), the
  // others skipped with a note; under mpirun the collectives run only if "collectives" is named.
  std::vector<std::string> only;
};

// Without a GPU the calibration measures the CPU with CPU-sized shapes (those
// of --quick): the GPU's would take hours there. Rough wall time of a whole
// calibration, printed before it starts: `cuda` full sizes about 170 s (one
// H100, validation/h100/calib19: 169 s), CPU-sized shapes about 60 s here.
double estimated_calibration_seconds(bool cuda, bool quick);

// The parts calibrate --only takes, in the order they run.
const std::vector<std::string>& calibration_part_names();

struct CalibrateRun {
  bool report = true;            // false on ranks other than 0
  nlohmann::json measured;       // the points; schema in docs/VALIDATION.md ("planner calibrate")
};

// Throws planner::InputError for bad options (unknown --device, no GPU for
// --device cuda), std::runtime_error when a measurement fails.
CalibrateRun run_calibration(const CalibrateOptions& options);

}  // namespace planner::rt
