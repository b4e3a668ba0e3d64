#include "strategies/step_program.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace planner {

const char* to_string(StepOp op) {
  switch (op) {
    case StepOp::Forward: return "F";
    case StepOp::Backward: return "B";
    case StepOp::SendF: return "SF";
    case StepOp::RecvF: return "RF";
    case StepOp::SendB: return "SB";
    case StepOp::RecvB: return "RB";
    case StepOp::Gather: return "G";
    case StepOp::Release: return "R";
    case StepOp::Reduce: return "Red";
    case StepOp::ToHost: return "H";
    case StepOp::Sync: return "Sync";
    case StepOp::Norm: return "Norm";
    case StepOp::Opt: return "Opt";
    case StepOp::ToDevice: return "D";
    case StepOp::AllGather: return "AG";
  }
  return "?";
}

std::string StepAction::to_string() const {
  switch (op) {
    case StepOp::Forward:
    case StepOp::Backward: return fmt::format("{}{}{}.{}", stage, planner::to_string(op), microbatch, unit);
    case StepOp::SendF:
    case StepOp::RecvF:
    case StepOp::SendB:
    case StepOp::RecvB:
      return chunk > 0 ? fmt::format("{}{}{}.c{}", stage, planner::to_string(op), microbatch, chunk)
                       : fmt::format("{}{}{}", stage, planner::to_string(op), microbatch);
    case StepOp::Sync:
    case StepOp::Norm:
    case StepOp::Opt: return fmt::format("{}{}", stage, planner::to_string(op));
    case StepOp::Reduce: return fmt::format("{}{}{}{}", stage, scatter ? "RS" : "AR", unit, "");
    default: return fmt::format("{}{}{}", stage, planner::to_string(op), unit);
  }
}

namespace {

bool is_compute(StepOp op) { return op == StepOp::Forward || op == StepOp::Backward; }

struct StageBuilder {
  const Strategy& s;
  const LayerPartition& part;
  int stage;
  bool tied_here;  // this stage holds both the embedding and the head, and they share the word matrix
  StepList out;
  std::set<int> gathered;

  // ZeRO-3: make unit u's parameters present. A Release of u since the last
  // compute action is cancelled instead (the unit simply stays gathered).
  void need(int u) {
    if (s.zero != 3 || gathered.count(u)) return;
    for (size_t i = out.size(); i-- > 0 && !is_compute(out[i].op);) {
      if (out[i].op == StepOp::Release && out[i].unit == u) {
        out.erase(out.begin() + std::ptrdiff_t(i));
        gathered.insert(u);
        return;
      }
    }
    out.push_back({StepOp::Gather, stage, -1, u});
    gathered.insert(u);
  }
  void release(int u) {
    if (s.zero != 3) return;
    out.push_back({StepOp::Release, stage, -1, u});
    gathered.erase(u);
  }

  void forward(int mb, int chunk) {
    auto [b, e] = part.units_of(stage, chunk);
    if (tied_here && chunk == s.vpp - 1) need(0);  // the head needs the word matrix
    need(b);
    for (int u = b; u < e; ++u) {
      if (u + 1 < e) need(u + 1);  // prefetch the next unit while this one computes
      out.push_back({StepOp::Forward, stage, mb, u, chunk});
      if (!(tied_here && u == 0)) release(u);
    }
  }

  void backward(int mb, int chunk, bool last_of_chunk) {
    auto [b, e] = part.units_of(stage, chunk);
    const bool dp_reduce = s.dp > 1 || s.zero >= 2;
    const bool every = s.zero >= 2;
    if (tied_here && chunk == s.vpp - 1) need(0);
    need(e - 1);
    for (int u = e - 1; u >= b; --u) {
      if (u - 1 >= b) need(u - 1);
      out.push_back({StepOp::Backward, stage, mb, u, chunk});
      // With tied embeddings unit 0's gradient is complete only after its own backward.
      if (dp_reduce && (every || last_of_chunk)) {
        StepAction r{StepOp::Reduce, stage, -1, u};
        r.scatter = s.zero >= 2;
        out.push_back(r);
      }
      if (s.offload != Offload::None && last_of_chunk) out.push_back({StepOp::ToHost, stage, -1, u});
      release(u);
    }
  }

  void finish() {
    out.push_back({StepOp::Sync, stage});
    out.push_back({StepOp::Norm, stage});
    out.push_back({StepOp::Opt, stage});
    const std::vector<int> units = part.stage_units(stage);
    if (s.offload != Offload::None && !(s.offload == Offload::All && s.zero == 3))
      for (int u : units) out.push_back({StepOp::ToDevice, stage, -1, u});
    if ((s.zero == 1 || s.zero == 2) && s.dp > 1)
      for (int u : units) out.push_back({StepOp::AllGather, stage, -1, u});
  }
};

}  // namespace

StepProgram build_step_program(const Strategy& s, int64_t layers, const StepOptions& opt) {
  StepProgram prog{LayerPartition(layers, s.pp, s.schedule == Schedule::Interleaved ? s.vpp : 1), {}, s.gas};
  const PipelineSchedule sched = make_schedule(s);
  const LayerPartition& part = prog.partition;
  for (int st = 0; st < s.pp; ++st) {
    const StageActions& list = sched[size_t(st)];
    // The last backward of each chunk in this stage's list: where ZeRO-0/1
    // reduce and offload copies go.
    std::vector<size_t> last_b(size_t(part.vpp()), 0);
    for (size_t i = 0; i < list.size(); ++i)
      if (list[i].op == Op::B) last_b[size_t(list[i].chunk)] = i;
    const bool tied = opt.tied_embeddings && st == 0 && st == s.pp - 1 && part.vpp() == 1;
    StageBuilder b{s, part, st, tied, {}, {}};
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      switch (a.op) {
        case Op::F: b.forward(a.microbatch, a.chunk); break;
        case Op::B: b.backward(a.microbatch, a.chunk, i == last_b[size_t(a.chunk)]); break;
        case Op::SendF: b.out.push_back({StepOp::SendF, st, a.microbatch, -1, a.chunk}); break;
        case Op::RecvF: b.out.push_back({StepOp::RecvF, st, a.microbatch, -1, a.chunk}); break;
        case Op::SendB: b.out.push_back({StepOp::SendB, st, a.microbatch, -1, a.chunk}); break;
        case Op::RecvB: b.out.push_back({StepOp::RecvB, st, a.microbatch, -1, a.chunk}); break;
        case Op::AllReduce: break;  // expanded into the per-unit Reduce actions above
        case Op::OptStep: b.finish(); break;
      }
    }
    prog.stages.push_back(std::move(b.out));
  }
  return prog;
}

std::string to_string(const StepProgram& p) {
  std::string out;
  for (const auto& st : p.stages) {
    for (size_t i = 0; i < st.size(); ++i) out += (i ? " " : "") + st[i].to_string();
    out += "\n";
  }
  return out;
}

}  // namespace planner
