// HardwareProfile::collective_groups: the per-group-size collective figures
// planner calibrate measures under mpirun -np N, their lookup (interpolated
// in log2 of the group size, held outside the measured sizes) and the note
// every answer carries when a plan's group is larger than any measured one.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "costmodel/hardware_profile.hpp"
#include "strategies/errors.hpp"

namespace planner {

namespace {

using Group = HardwareProfile::CollectiveGroup;

// Every interpolated field, by member pointer (group_size and pcie are not).
constexpr double Group::*kFields[] = {&Group::all_reduce_efficiency,       &Group::reduce_scatter_efficiency,
                                      &Group::all_gather_efficiency,       &Group::broadcast_efficiency,
                                      &Group::base_latency_seconds,        &Group::compute_slowdown_beside_comm,
                                      &Group::comm_slowdown_beside_compute};
constexpr const char* kNames[] = {"all_reduce_efficiency",        "reduce_scatter_efficiency",
                                  "all_gather_efficiency",        "broadcast_efficiency",
                                  "base_latency_seconds",         "compute_slowdown_beside_comm",
                                  "comm_slowdown_beside_compute"};

}  // namespace

CollectiveGroupAt collective_group_at(const std::vector<Group>& t, int g) {
  CollectiveGroupAt out;
  if (t.empty()) return out;
  out.found = true;
  if (g <= t.front().group_size) {
    out.value = t.front();
  } else if (g >= t.back().group_size) {
    out.value = t.back();
    out.extrapolated = g > t.back().group_size;
  } else {
    size_t i = 1;
    while (t[i].group_size < g) ++i;  // t[i-1] < g <= t[i]
    const Group &lo = t[i - 1], &hi = t[i];
    const double x = (std::log2(double(g)) - std::log2(double(lo.group_size))) /
                     (std::log2(double(hi.group_size)) - std::log2(double(lo.group_size)));
    out.value = lo;
    for (auto f : kFields) out.value.*f = lo.*f + (hi.*f - lo.*f) * x;
  }
  out.value.group_size = g;
  return out;
}

std::string collective_extrapolation_note(const HardwareProfile& p, const Strategy& s) {
  const int largest = p.largest_measured_group();
  if (largest == 0) return "";
  // The plan's collective groups: data-parallel (DP/ZeRO: the dp-cp group
  // under context parallelism), tensor-parallel, and the pairs of a
  // pipeline's sends.
  struct Axis {
    const char* name;
    int size;
  };
  const Axis axes[] = {{s.cp > 1 ? "dp-cp" : "dp", s.dp_cp()}, {"tp", s.tp}, {"pp send/recv", s.pp > 1 ? 2 : 1}};
  const Axis* worst = nullptr;
  for (const Axis& a : axes)
    if (a.size > largest && (!worst || a.size > worst->size)) worst = &a;
  if (!worst) return "";
  return fmt::format("collectives extrapolated: the profile's largest measured group is {} GPUs, this plan's {} "
                     "group has {}: its rates, latency and slowdowns are the {}-GPU figures (not measured at {})",
                     largest, worst->name, worst->size, largest, worst->size);
}

nlohmann::json collective_groups_to_json(const std::vector<Group>& t) {
  nlohmann::json a = nlohmann::json::array();
  for (const Group& e : t) {
    nlohmann::json j = {{"group_size", e.group_size}, {"link", e.pcie ? "pcie" : "nvlink"}};
    for (size_t k = 0; k < std::size(kFields); ++k) j[kNames[k]] = e.*kFields[k];
    a.push_back(j);
  }
  return a;
}

std::vector<Group> collective_groups_from_json(const nlohmann::json& a) {
  if (!a.is_array()) throw InputError("profile: 'collective_groups' must be an array");
  std::vector<Group> t;
  for (size_t i = 0; i < a.size(); ++i) {
    const nlohmann::json& e = a[i];
    auto need = [&](const char* key) -> const nlohmann::json& {
      if (!e.is_object() || !e.contains(key))
        throw InputError(fmt::format("profile: collective_groups[{}] lacks '{}'", i, key));
      return e.at(key);
    };
    for (auto it = e.begin(); e.is_object() && it != e.end(); ++it) {
      bool known = it.key() == "group_size" || it.key() == "link";
      for (const char* n : kNames) known = known || it.key() == n;
      if (!known) throw InputError(fmt::format("profile: collective_groups[{}] has an unknown key '{}'", i, it.key()));
    }
    Group g;
    const nlohmann::json& size = need("group_size");
    if (!size.is_number_integer() || size.get<int64_t>() < 2 || size.get<int64_t>() > (int64_t(1) << 20))
      throw InputError(fmt::format("profile: collective_groups[{}].group_size must be an integer from 2 to 2^20", i));
    g.group_size = size.get<int>();
    const nlohmann::json& link = need("link");
    if (!link.is_string() || (link != "nvlink" && link != "pcie"))
      throw InputError(fmt::format("profile: collective_groups[{}].link must be \"nvlink\" or \"pcie\"", i));
    g.pcie = link == "pcie";
    for (size_t k = 0; k < std::size(kFields); ++k) {
      const nlohmann::json& v = need(kNames[k]);
      if (!v.is_number()) throw InputError(fmt::format("profile: collective_groups[{}].{} must be a number", i, kNames[k]));
      const double x = v.get<double>();
      const bool efficiency = k < 4, latency = k == 4;
      const bool ok = efficiency ? x > 0 && x <= 1.0
                      : latency  ? x >= 0 && std::isfinite(x)
                                 : x >= 1 && x <= HardwareProfile::kMaxCommSlowdown;
      if (!ok)
        throw InputError(fmt::format("profile: collective_groups[{}].{}={} must be {}", i, kNames[k], x,
                                     efficiency ? "a fraction in (0, 1]"
                                     : latency  ? "zero or positive"
                                                : fmt::format("from 1 to {}", HardwareProfile::kMaxCommSlowdown)));
      g.*kFields[k] = x;
    }
    if (!t.empty() && g.group_size <= t.back().group_size)
      throw InputError(fmt::format("profile: collective_groups[{}]: group sizes must ascend (group_size {} after {})", i,
                                   g.group_size, t.back().group_size));
    if (!t.empty() && g.pcie != t.back().pcie)
      throw InputError(fmt::format("profile: collective_groups[{}]: every entry must be of one link", i));
    t.push_back(g);
  }
  return t;
}

}  // namespace planner
