#pragma once
// Internals of the measured run (runtime/measure.cpp: set-up and loop;
// runtime/measure_report.cpp: what is read off the Engine after the loop,
// gathered over the ranks and reported). Not part of the runtime's interface.
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "runtime/comm/communicator.hpp"
#include "runtime/engine.hpp"
#include "runtime/measure.hpp"

namespace planner::rt::detail {

// What the loop reads off the allocator (bytes above the allocation before
// the Engine was built, largest over the timed steps).
struct LoopMemory {
  int64_t before_head = 0, peak_fwd_bwd = 0, transient_peak = 0, step_start = 0, peak_alloc = 0, peak_res = 0;
};

// The q-quantile of v (linear interpolation between order statistics).
double quantile(std::vector<double> v, double q);
// Every rank's `mine` concatenated, through the CPU (MPI) world communicator
// (mine itself without one).
std::vector<double> all_gather_doubles(Communicator* world, const std::vector<double>& mine);
// The measured timeline of the last step (RunOptions::trace) into r.
void gather_trace(const RunConfig& cfg, Communicator* world, Engine& engine, Measurement& r);
// The memory model's categories from the loop's readings.
void memory_categories(bool cuda, int64_t outside0, const LoopMemory& lm, Measurement& r);
// Every rank's figures to every rank; the step's time is the slowest rank's.
void gather_ranks(Communicator* world, Measurement& r);
// MoE: the routing that ran (Measurement::moe_routing, a note when balanced);
// with ep > 1 the routing's imbalance over rank 0's ep group
// (Measurement::moe_imbalance), from every rank's MoeBlock::received_rows.
void gather_moe_routing(const RunConfig& cfg, Communicator* world, Engine& engine, Measurement& r);
// Timing statistics, throughput, MFU and the notes.
void report(const RunConfig& cfg, bool cuda, Measurement& r);

}  // namespace planner::rt::detail
