#include "strategies/step_program.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <set>

#include "strategies/errors.hpp"
#include "strategies/schedule.hpp"

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
    case StepOp::TiedReduce: return "TE";
    case StepOp::ReplicaReduce: return "Rep";
    case StepOp::LossReduce: return "LR";
    case StepOp::NormReduce: return "NR";
    case StepOp::Clip: return "Clip";
    case StepOp::CpRingF: return "KVF";
    case StepOp::CpRingB: return "KVB";
    case StepOp::MoeATAF: return "ATAF";
    case StepOp::MoeATAB: return "ATAB";
  }
  return "?";
}

bool parse_step_op(std::string_view name, StepOp& op) {
  for (int k = 0; k < kStepOps; ++k)
    if (name == to_string(StepOp(k))) return op = StepOp(k), true;
  return false;
}

namespace {

// The printed name of an action: the op's name, except Reduce, which prints
// as the collective it is.
// The printed name of an action: the op's name, except Reduce, which prints
// as the collective it is, and the reductions of a group, which name it.
const char* print_name(const StepAction& a) {
  if (a.op == StepOp::Reduce) return a.scatter ? "RS" : "AR";
  const bool lr = a.op == StepOp::LossReduce, nr = a.op == StepOp::NormReduce;
  if (lr || nr) {
    switch (a.group) {
      case CommGroup::Tp: return nr ? "NRtp" : "LRtp";
      case CommGroup::Dp: return nr ? "NRdp" : "LRdp";
      case CommGroup::Pp: return nr ? "NRpp" : "LRpp";
      case CommGroup::None: break;
    }
  }
  return to_string(a.op);
}

bool has_microbatch(StepOp op) { return int(op) <= int(StepOp::RecvB) || is_pass_exchange(op); }
bool has_unit(StepOp op) {
  switch (op) {
    case StepOp::Gather:
    case StepOp::Release:
    case StepOp::Reduce:
    case StepOp::ToHost:
    case StepOp::ToDevice:
    case StepOp::AllGather: return true;
    default: return false;
  }
}
bool has_group(StepOp op) { return op == StepOp::LossReduce || op == StepOp::NormReduce; }

}  // namespace

std::string StepAction::to_string() const {
  std::string out = fmt::format("{}{}", stage, print_name(*this));
  if (has_microbatch(op)) {
    out += fmt::format("{}", microbatch);
    if ((is_compute(op) || is_pass_exchange(op)) && unit >= 0) out += fmt::format(".{}", unit);
    if (chunk > 0) out += fmt::format(".c{}", chunk);
  } else if (has_unit(op)) {
    out += fmt::format("{}", unit);
  }
  return out;
}

StepAction parse_step_action(std::string_view t) {
  auto bad = [&](const char* why) {
    return InputError(fmt::format("step action '{}': {}", std::string(t), why));
  };
  size_t i = 0;
  auto number = [&]() {
    const size_t b = i;
    while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) ++i;
    if (i == b || i - b > 9) throw bad("expected a number");
    return std::stoi(std::string(t.substr(b, i - b)));
  };
  StepAction a;
  a.stage = number();
  const size_t b = i;
  while (i < t.size() && std::isalpha(static_cast<unsigned char>(t[i]))) ++i;
  const std::string_view name = t.substr(b, i - b);
  bool found = false;
  for (int k = 0; k < kStepOps && !found; ++k) {
    StepAction probe;
    probe.op = StepOp(k);
    for (int g = 0; g < 4 && !found; ++g) {
      probe.group = CommGroup(g);
      if (has_group(probe.op) == (g == 0)) continue;
      for (bool sc : {false, true}) {
        probe.scatter = sc;
        if (name == print_name(probe) && (probe.op == StepOp::Reduce || !sc)) {
          a.op = probe.op, a.scatter = sc, a.group = probe.group, found = true;
          break;
        }
      }
    }
  }
  if (!found) throw bad("unknown op");
  if (has_microbatch(a.op)) {
    a.microbatch = number();
    if ((is_compute(a.op) || is_pass_exchange(a.op)) && i + 1 < t.size() && t[i] == '.' && std::isdigit(static_cast<unsigned char>(t[i + 1])))
      ++i, a.unit = number();
    if (i + 1 < t.size() && t[i] == '.' && t[i + 1] == 'c') i += 2, a.chunk = number();
  } else if (has_unit(a.op)) {
    a.unit = number();
  }
  if (i != t.size()) throw bad("unexpected text after the action");
  return a;
}

std::vector<StepList> parse_step_lists(std::string_view text) {
  std::vector<StepList> out;
  size_t p = 0;
  while (p < text.size()) {
    size_t e = text.find('\n', p);
    if (e == std::string_view::npos) e = text.size();
    const std::string_view line = text.substr(p, e - p);
    StepList list;
    for (size_t i = 0; i < line.size();) {
      const size_t j = std::min(line.find(' ', i), line.size());
      if (j > i) list.push_back(parse_step_action(line.substr(i, j - i)));
      i = j + 1;
    }
    out.push_back(std::move(list));
    p = e + 1;
  }
  return out;
}

StepList expand_units(const StepList& in, const LayerPartition& part) {
  StepList out;
  out.reserve(in.size() * 2);
  for (const StepAction& a : in) {
    if (!is_compute(a.op) || a.unit >= 0) {
      out.push_back(a);
      continue;
    }
    const auto [b, e] = part.units_of(a.stage, a.chunk);
    StepAction x = a;
    if (a.op == StepOp::Forward)
      for (int u = b; u < e; ++u) x.unit = u, out.push_back(x);
    else
      for (int u = e - 1; u >= b; --u) x.unit = u, out.push_back(x);
  }
  return out;
}

StepList add_grad_reductions(const StepList& in, const Strategy& s) {
  // Gradients are summed over every rank holding the same parameters: the
  // dp-cp group (context-parallel ranks see different tokens of one sequence).
  const bool dp_reduce = s.dp_cp() > 1 || s.zero >= 2;
  const bool every = s.zero >= 2;
  const bool offload = s.offload != Offload::None;
  if (!dp_reduce && !offload) return in;
  // A unit's gradient is complete after its last backward of the step (with
  // tied embeddings too: unit 0's backward comes after the head's).
  int units = 0;
  for (const StepAction& a : in) units = std::max(units, a.unit + 1);
  std::vector<size_t> last_b(size_t(units), 0);
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i].op == StepOp::Backward) last_b[size_t(in[i].unit)] = i;
  StepList out;
  out.reserve(in.size() * 2);
  for (size_t i = 0; i < in.size(); ++i) {
    const StepAction& a = in[i];
    out.push_back(a);
    if (a.op != StepOp::Backward) continue;
    const bool last = i == last_b[size_t(a.unit)];
    if (dp_reduce && (every || last)) {
      StepAction r{StepOp::Reduce, a.stage, -1, a.unit};
      r.scatter = s.zero >= 2;
      out.push_back(r);
    }
    if (offload && last) out.push_back({StepOp::ToHost, a.stage, -1, a.unit});
  }
  return out;
}

StepList add_layer_exchanges(const StepList& in, const Strategy& s, const LayerPartition& part) {
  const bool cp = s.cp > 1, moe = s.ep > 1;
  if (!cp && !moe) return in;
  StepList out;
  out.reserve(in.size() * (1 + size_t(cp) + size_t(moe)));
  for (const StepAction& a : in) {
    // Only layer units hold attention and experts: not the embedding (unit 0) or the head.
    if (is_compute(a.op) && a.unit > 0 && a.unit != part.head_unit()) {
      const bool fwd = a.op == StepOp::Forward;
      auto before = [&](StepOp op) {
        StepAction x = a;
        x.op = op;
        out.push_back(x);
      };
      if (cp) before(fwd ? StepOp::CpRingF : StepOp::CpRingB);
      if (moe) before(fwd ? StepOp::MoeATAF : StepOp::MoeATAB);
    }
    out.push_back(a);
  }
  return out;
}

namespace {

// ZeRO-3's gathers and releases over one stage's list.
struct Gathers {
  StepList out;
  std::set<int> gathered;
  int stage;

  // Make unit u's parameters present. A Release of u since the last compute
  // action is cancelled instead (the unit simply stays gathered).
  void need(int u) {
    if (gathered.count(u)) return;
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
    out.push_back({StepOp::Release, stage, -1, u});
    gathered.erase(u);
  }
};

}  // namespace

StepList add_param_gathers(const StepList& in, const Strategy& s, const LayerPartition& part, bool tied_here) {
  if (s.zero != 3 || in.empty()) return in;
  Gathers g{{}, {}, in.front().stage};
  g.out.reserve(in.size() * 2);
  int pending = -1;  // the unit whose compute ran last: released once its reduction and copy are issued
  for (const StepAction& a : in) {
    const bool own_follow_up = (a.op == StepOp::Reduce || a.op == StepOp::ToHost) && a.unit == pending;
    if (pending >= 0 && !own_follow_up) g.release(pending), pending = -1;
    if (!is_compute(a.op)) {
      g.out.push_back(a);
      continue;
    }
    const auto [b, e] = part.units_of(a.stage, a.chunk);
    const bool fwd = a.op == StepOp::Forward;
    const int first = fwd ? b : e - 1, next = fwd ? a.unit + 1 : a.unit - 1;
    if (a.unit == first) {
      if (tied_here && a.chunk == part.vpp() - 1) g.need(0);  // the head needs the word matrix
      g.need(first);
    }
    if (next >= b && next < e) g.need(next);  // prefetch the next unit while this one computes
    g.out.push_back(a);
    // The tied word matrix stays gathered from the embedding's forward to the head.
    if (!(fwd && tied_here && a.unit == 0)) pending = a.unit;
  }
  if (pending >= 0) g.release(pending);
  return std::move(g.out);
}

StepList add_step_tail(StepList out, const Strategy& s, const LayerPartition& part, int stage,
                       const StepOptions& opt) {
  auto group_op = [&](StepOp op, CommGroup g) {
    StepAction a{op, stage};
    a.group = g;
    out.push_back(a);
  };
  // Every collective of the step's end is an action, in the order every rank
  // of a group issues it (the runtime's communicators have no tags).
  out.push_back({StepOp::Sync, stage});
  if (opt.tied_embeddings && s.pp > 1 && (stage == 0 || stage == s.pp - 1)) out.push_back({StepOp::TiedReduce, stage});
  if (s.sp && s.tp > 1) out.push_back({StepOp::ReplicaReduce, stage});
  if (s.pp > 1) group_op(StepOp::LossReduce, CommGroup::Pp);
  if (s.dp_cp() > 1) group_op(StepOp::LossReduce, CommGroup::Dp);  // Dp: the dp-cp group
  out.push_back({StepOp::Norm, stage});
  if (s.tp > 1) group_op(StepOp::NormReduce, CommGroup::Tp);
  if (s.zero >= 2 && s.dp_cp() > 1) group_op(StepOp::NormReduce, CommGroup::Dp);
  if (s.pp > 1) group_op(StepOp::NormReduce, CommGroup::Pp);
  out.push_back({StepOp::Clip, stage});
  out.push_back({StepOp::Opt, stage});
  const std::vector<int> units = part.stage_units(stage);
  if (s.offload != Offload::None && !(s.offload == Offload::All && s.zero == 3))
    for (int u : units) out.push_back({StepOp::ToDevice, stage, -1, u});
  if ((s.zero == 1 || s.zero == 2) && s.dp_cp() > 1)
    for (int u : units) out.push_back({StepOp::AllGather, stage, -1, u});
  return out;
}

StepProgram build_step_program(const Strategy& s, int64_t layers, const StepOptions& opt) {
  StepProgram prog{LayerPartition(layers, s.pp, s.schedule == Schedule::Interleaved ? s.vpp : 1), {}, s.gas, opt};
  const LayerPartition& part = prog.partition;
  const PipelineSchedule sched = add_pipeline_transfers(compute_schedule(s), part.vpp());
  for (int st = 0; st < s.pp; ++st) {
    const bool tied = opt.tied_embeddings && st == 0 && st == s.pp - 1 && part.vpp() == 1;
    StepList list = expand_units(sched[size_t(st)], part);
    list = add_layer_exchanges(list, s, part);
    list = add_grad_reductions(list, s);
    list = add_param_gathers(list, s, part, tied);
    prog.stages.push_back(add_step_tail(std::move(list), s, part, st, opt));
  }
  return prog;
}

int max_inflight(const StepList& actions) { return max_inflight(actions, -1); }

int max_inflight(const StepList& actions, int chunk) {
  // A pass is one action per chunk (a schedule) or its units back to back
  // (a program): a forward or backward of another (micro-batch, chunk) than
  // the one before starts a pass. chunk >= 0: that chunk's passes only.
  int live = 0, peak = 0;
  std::pair<int, int> last_f{-1, -1}, last_b{-1, -1};
  for (const StepAction& a : actions) {
    if (chunk >= 0 && a.chunk != chunk) continue;
    const std::pair<int, int> key{a.microbatch, a.chunk};
    if (a.op == StepOp::Forward && (a.unit < 0 || key != last_f)) peak = std::max(peak, ++live);
    if (a.op == StepOp::Backward && (a.unit < 0 || key != last_b)) --live;
    if (a.op == StepOp::Forward) last_f = key;
    if (a.op == StepOp::Backward) last_b = key;
  }
  return peak;
}

double max_inflight_weighted(const StepList& actions, const std::vector<double>& chunk_weight) {
  // The same pass rule as max_inflight.
  double live = 0, peak = 0;
  std::pair<int, int> last_f{-1, -1}, last_b{-1, -1};
  auto weight = [&](int chunk) { return chunk_weight.at(size_t(std::max(0, chunk))); };
  for (const StepAction& a : actions) {
    const std::pair<int, int> key{a.microbatch, a.chunk};
    if (a.op == StepOp::Forward && (a.unit < 0 || key != last_f)) peak = std::max(peak, live += weight(a.chunk));
    if (a.op == StepOp::Backward && (a.unit < 0 || key != last_b)) live -= weight(a.chunk);
    if (a.op == StepOp::Forward) last_f = key;
    if (a.op == StepOp::Backward) last_b = key;
  }
  return peak;
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
