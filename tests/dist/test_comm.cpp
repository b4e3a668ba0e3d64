// Communicator tests under mpirun (dist_np2, dist_np4; also runs as one rank):
// every operation for every supported dtype, on the world and on RankGrid's
// dp and tp groups; in-place forms; outstanding works waited out of order;
// argument errors. The MPI backend (CPU tensors) always; the NCCL backend too
// when this build has it and every rank of a node has its own GPU.
//
// Values: world rank r contributes (r + 1) * (i % 7 + 1) at element i: small
// integers, exact in every dtype (bfloat16 included), so sums compare exactly.
#include <mpi.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "runtime/comm/communicator.hpp"
#include "strategies/rank_grid.hpp"
// Last: c10's logging header defines a glog-style CHECK that must not replace Catch's.
#include "catch.hpp"

namespace rt = planner::rt;

#if defined(PLANNER_CATCH3)
inline auto Contains(const std::string& s) { return Catch::Matchers::ContainsSubstring(s); }
#else
using Catch::Matchers::Contains;
#endif

namespace {

const std::chrono::seconds kTimeout{60};

rt::WorldInfo world() { return rt::init_world(); }

// The CPU always; CUDA (device = local rank) when NCCL is built in and every
// rank, on every node, has its own GPU.
std::vector<at::Device> devices() {
  std::vector<at::Device> d{at::Device(at::kCPU)};
  const auto w = world();
  int ok = rt::has_nccl() && static_cast<int>(torch::cuda::device_count()) >= w.local_size ? 1 : 0, all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (all) d.emplace_back(at::kCUDA, static_cast<at::DeviceIndex>(w.local_rank));
  return d;
}

// Groups to test on: the world, and with an even world RankGrid(dp = n/2, tp = 2)'s
// tp and dp groups (at np = 2: tp {0,1}, dp {0} {1}; at np = 4: tp {0,1} {2,3}, dp {0,2} {1,3}).
struct GroupSet {
  std::string name;
  std::vector<std::vector<int>> groups;
};
std::vector<GroupSet> group_sets() {
  const int n = world().size;
  std::vector<int> all;
  for (int r = 0; r < n; ++r) all.push_back(r);
  std::vector<GroupSet> s{{"world", {all}}};
  if (n % 2 == 0) {
    const planner::RankGrid g(n / 2, 1, 2);
    s.push_back({"tp", g.all_tp_groups()});
    s.push_back({"dp", g.all_dp_groups()});
  }
  return s;
}

// (n,) in double: (r + 1) * (i % 7 + 1)
at::Tensor values(int world_rank, int64_t n) {
  return (at::arange(n, at::kLong).remainder(7) + 1).to(at::kDouble) * (world_rank + 1);
}
at::Tensor values(int world_rank, int64_t n, at::ScalarType t, at::Device dev) {
  return values(world_rank, n).to(t).to(dev);
}
at::Tensor sum_over(const std::vector<int>& members, int64_t n) {
  at::Tensor s = at::zeros({n}, at::kDouble);
  for (int r : members) s += values(r, n);
  return s;
}
bool same(const at::Tensor& got, const at::Tensor& want_double) {
  return at::equal(got.to(at::kCPU).to(at::kDouble), want_double);
}

// The message of the std::runtime_error that f throws, or "" when none.
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

const std::vector<at::ScalarType> kDtypes{at::kFloat, at::kDouble, at::kBFloat16, at::kHalf, at::kLong};

}  // namespace

TEST_CASE("all_reduce sums over the group, every dtype, world/tp/dp groups", "[dist][comm]") {
  const auto w = world();
  for (const auto& dev : devices())
    for (const auto& gs : group_sets()) {
      auto c = rt::make_communicator(gs.groups, gs.name, dev, kTimeout);
      REQUIRE(c->members()[static_cast<size_t>(c->rank())] == w.rank);
      for (auto dt : kDtypes) {
        INFO(dev.str() << " group " << gs.name << " dtype " << c10::toString(dt));
        at::Tensor t = values(w.rank, 37, dt, dev);
        c->all_reduce(t)->wait();
        CHECK(same(t, sum_over(c->members(), 37)));
      }
    }
}

TEST_CASE("all_reduce_max takes the elementwise maximum over the group (float32)", "[dist][comm]") {
  const auto w = world();
  for (const auto& dev : devices())
    for (const auto& gs : group_sets()) {
      auto c = rt::make_communicator(gs.groups, gs.name, dev, kTimeout);
      INFO(dev.str() << " group " << gs.name);
      // Element i of rank r: (r + 1) * (i % 3 == 0 ? 1 : -1) * (i + 1), and
      // element 1 the largest on the group's first member: every element's
      // maximum comes from a different rank than the sum's largest term.
      const auto f = at::TensorOptions(at::kFloat);
      at::Tensor t = at::empty({5}, f);
      for (int i = 0; i < 5; ++i) t[i] = float((w.rank + 1) * (i % 3 == 0 ? 1 : -1) * (i + 1));
      if (c->rank() == 0) t[1] = 1000.0f + float(w.rank);
      std::vector<float> want(5);
      const auto& ms = c->members();
      for (int i = 0; i < 5; ++i) {
        float mx = -1e30f;
        for (int r : ms) mx = std::max(mx, float((r + 1) * (i % 3 == 0 ? 1 : -1) * (i + 1)));
        want[size_t(i)] = mx;
      }
      want[1] = 1000.0f + float(ms.front());
      at::Tensor d = t.to(dev);
      c->all_reduce_max(d)->wait();
      const at::Tensor got = d.cpu();
      for (int i = 0; i < 5; ++i) CHECK(got[i].item<float>() == want[size_t(i)]);
      CHECK_THROWS_WITH(c->all_reduce_max(at::ones({2}, at::TensorOptions(at::kDouble).device(dev))),
                        Contains("float32 only"));
    }
}

TEST_CASE("hand-computed sums at np = 4 (dp = 2, tp = 2)", "[dist][comm]") {
  const auto w = world();
  if (w.size != 4) return;
  const planner::RankGrid g(2, 1, 2);  // tp {0,1} {2,3}; dp {0,2} {1,3}
  for (const auto& dev : devices()) {
    auto tp = rt::make_communicator(g.all_tp_groups(), "tp", dev, kTimeout);
    auto dp = rt::make_communicator(g.all_dp_groups(), "dp", dev, kTimeout);
    // Element 0 of rank r is r + 1.
    at::Tensor a = at::full({1}, w.rank + 1.0, at::TensorOptions(at::kFloat).device(dev));
    at::Tensor b = a.clone();
    tp->all_reduce(a)->wait();
    dp->all_reduce(b)->wait();
    const float tp_sum[] = {3, 3, 7, 7};  // 1+2, 3+4
    const float dp_sum[] = {4, 6, 4, 6};  // 1+3, 2+4
    CHECK(a.cpu().item<float>() == tp_sum[w.rank]);
    CHECK(b.cpu().item<float>() == dp_sum[w.rank]);
    CHECK(tp->members() == g.tp_group(w.rank));
    CHECK(dp->members() == g.dp_group(w.rank));
    CHECK(dp->rank() == w.rank / 2);
    // all_gather over dp at rank 1: {2, 4}; reduce_scatter over tp of {1*(r+1), 2*(r+1)}.
    at::Tensor gathered = at::empty({2}, a.options());
    dp->all_gather(at::full({1}, w.rank + 1.0, a.options()), gathered)->wait();
    const float dp_first[] = {1, 2, 1, 2}, dp_second[] = {3, 4, 3, 4};
    CHECK(gathered.cpu()[0].item<float>() == dp_first[w.rank]);
    CHECK(gathered.cpu()[1].item<float>() == dp_second[w.rank]);
    at::Tensor in = at::tensor({1.0f, 2.0f}, at::kFloat).to(dev) * (w.rank + 1);
    at::Tensor out = at::empty({1}, a.options());
    tp->reduce_scatter(in, out)->wait();
    const float rs[] = {3, 6, 7, 14};  // tp {0,1}: (1+2)*{1,2}; tp {2,3}: (3+4)*{1,2}
    CHECK(out.cpu().item<float>() == rs[w.rank]);
  }
}

TEST_CASE("reduce_scatter: out = chunk rank() of the sum, separate and in place", "[dist][comm]") {
  const auto w = world();
  const int64_t n = 13;
  for (const auto& dev : devices())
    for (const auto& gs : group_sets()) {
      auto c = rt::make_communicator(gs.groups, gs.name, dev, kTimeout);
      const int64_t k = c->size();
      const at::Tensor want = sum_over(c->members(), n * k).narrow(0, c->rank() * n, n);
      for (auto dt : kDtypes) {
        INFO(dev.str() << " group " << gs.name << " dtype " << c10::toString(dt));
        at::Tensor in = values(w.rank, n * k, dt, dev);
        at::Tensor out = at::full({n}, -1, in.options());
        c->reduce_scatter(in, out)->wait();
        CHECK(same(out, want));
        CHECK(same(in, values(w.rank, n * k)));  // input untouched
        // In place: out is in's own chunk.
        at::Tensor buf = values(w.rank, n * k, dt, dev);
        c->reduce_scatter(buf, buf.narrow(0, c->rank() * n, n))->wait();
        CHECK(same(buf.narrow(0, c->rank() * n, n), want));
      }
    }
}

TEST_CASE("all_gather: chunk r of out = in of rank r, separate and in place", "[dist][comm]") {
  const auto w = world();
  const int64_t n = 11;
  for (const auto& dev : devices())
    for (const auto& gs : group_sets()) {
      auto c = rt::make_communicator(gs.groups, gs.name, dev, kTimeout);
      const int64_t k = c->size();
      std::vector<at::Tensor> parts;
      for (int r : c->members()) parts.push_back(values(r, n));
      const at::Tensor want = at::cat(parts);
      for (auto dt : kDtypes) {
        INFO(dev.str() << " group " << gs.name << " dtype " << c10::toString(dt));
        at::Tensor in = values(w.rank, n, dt, dev);
        at::Tensor out = at::full({n * k}, -1, in.options());
        c->all_gather(in, out)->wait();
        CHECK(same(out, want));
        // In place: in is out's own chunk; the other chunks start as garbage.
        at::Tensor buf = at::full({n * k}, -5, in.options());
        buf.narrow(0, c->rank() * n, n).copy_(in);
        c->all_gather(buf.narrow(0, c->rank() * n, n), buf)->wait();
        CHECK(same(buf, want));
      }
    }
}

TEST_CASE("broadcast from every root", "[dist][comm]") {
  const auto w = world();
  for (const auto& dev : devices())
    for (const auto& gs : group_sets()) {
      auto c = rt::make_communicator(gs.groups, gs.name, dev, kTimeout);
      for (int root = 0; root < c->size(); ++root)
        for (auto dt : kDtypes) {
          INFO(dev.str() << " group " << gs.name << " root " << root << " dtype " << c10::toString(dt));
          at::Tensor t = values(w.rank, 9, dt, dev);
          c->broadcast(t, root)->wait();
          CHECK(same(t, values(c->members()[static_cast<size_t>(root)], 9)));
        }
    }
}

TEST_CASE("send/recv around a ring", "[dist][comm]") {
  const auto w = world();
  for (const auto& dev : devices())
    for (const auto& gs : group_sets()) {
      auto c = rt::make_communicator(gs.groups, gs.name, dev, kTimeout);
      const int k = c->size();
      if (k < 2) continue;
      const int next = (c->rank() + 1) % k, prev = (c->rank() + k - 1) % k;
      for (auto dt : kDtypes) {
        INFO(dev.str() << " group " << gs.name << " dtype " << c10::toString(dt));
        at::Tensor mine = values(w.rank, 21, dt, dev);
        at::Tensor got = at::zeros({21}, mine.options());
        // Even ranks send first, odd ranks receive first: correct even when a
        // backend runs one point-to-point operation at a time.
        rt::WorkPtr a, b;
        if (c->rank() % 2 == 0) {
          a = c->send(mine, next);
          b = c->recv(got, prev);
        } else {
          a = c->recv(got, prev);
          b = c->send(mine, next);
        }
        b->wait();
        a->wait();
        CHECK(same(got, values(c->members()[static_cast<size_t>(prev)], 21)));
      }
    }
}

TEST_CASE("several outstanding works on two communicators, waited out of order", "[dist][comm]") {
  const auto w = world();
  for (const auto& dev : devices()) {
    const auto sets = group_sets();
    const auto& gs1 = sets.front();
    const auto& gs2 = sets.back();  // dp (even world) or the world again
    auto c1 = rt::make_communicator(gs1.groups, gs1.name, dev, kTimeout);
    auto c2 = rt::make_communicator(gs2.groups, gs2.name + "2", dev, kTimeout);
    std::vector<at::Tensor> ts;
    std::vector<rt::WorkPtr> works;
    for (int i = 0; i < 4; ++i) {
      ts.push_back(values(w.rank, 1000 + i, kDtypes[static_cast<size_t>(i)], dev));
      works.push_back(c1->all_reduce(ts.back()));
    }
    at::Tensor big = values(w.rank, 1 << 18, at::kFloat, dev);
    works.push_back(c2->all_reduce(big));
    at::Tensor g_in = values(w.rank, 5, at::kLong, dev);
    at::Tensor g_out = at::empty({5 * c2->size()}, g_in.options());
    works.push_back(c2->all_gather(g_in, g_out));
    for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
    for (auto& wk : works) {
      // On the GPU done() is the host's view of the device: wait for it.
      while (!wk->done()) {
      }
      CHECK(wk->done());
    }
    for (int i = 0; i < 4; ++i) CHECK(same(ts[static_cast<size_t>(i)], sum_over(c1->members(), 1000 + i)));
    CHECK(same(big, sum_over(c2->members(), 1 << 18)));
    std::vector<at::Tensor> parts;
    for (int r : c2->members()) parts.push_back(values(r, 5));
    CHECK(same(g_out, at::cat(parts)));
    c1->barrier();
    c2->barrier();
  }
}

TEST_CASE("16-bit sums are computed in fp32 and rounded once (groups of two)", "[dist][comm]") {
  const auto w = world();
  for (const auto& dev : devices())
    for (const auto& gs : group_sets()) {
      auto c = rt::make_communicator(gs.groups, gs.name, dev, kTimeout);
      if (c->size() != 2) continue;
      for (auto dt : {at::kBFloat16, at::kHalf}) {
        INFO(dev.str() << " group " << gs.name << " dtype " << c10::toString(dt));
        // Non-integers whose sums need rounding: 1 + i/64 and (r+1) * i/1000.
        auto mine = [&](int r) {
          const at::Tensor i = at::arange(64, at::kDouble);
          return (1 + i / 64 + (r + 1) * i / 1000).to(dt);
        };
        at::Tensor t = mine(w.rank).to(dev);
        c->all_reduce(t)->wait();
        const auto& m = c->members();
        const at::Tensor want = (mine(m[0]).to(at::kFloat) + mine(m[1]).to(at::kFloat)).to(dt);
        CHECK(at::equal(t.cpu(), want));
      }
    }
}

TEST_CASE("empty tensors and sizes that do not divide evenly are fine", "[dist][comm]") {
  for (const auto& dev : devices()) {
    auto c = rt::make_communicator(group_sets().front().groups, "world", dev, kTimeout);
    at::Tensor e = at::empty({0}, at::TensorOptions(at::kFloat).device(dev));
    c->all_reduce(e)->wait();
    c->all_gather(e, at::empty({0}, e.options()))->wait();
    at::Tensor odd = at::ones({1001}, e.options());
    c->all_reduce(odd)->wait();
    CHECK(odd.cpu().sum().item<float>() == 1001.0f * c->size());
  }
}

TEST_CASE("bad arguments are one-line errors, raised before any communication", "[dist][comm]") {
  const auto w = world();
  auto c = rt::make_communicator(group_sets().front().groups, "world", at::kCPU, kTimeout);
  CHECK(c->backend() == rt::Backend::Mpi);
  CHECK(c->name() == "world");
  const auto f = at::TensorOptions(at::kFloat);
  CHECK_THAT(error_of([&] { c->all_gather(at::ones({3}, f), at::empty({3 * c->size() + 1}, f)); }), Contains("all_gather: out has"));
  CHECK_THAT(error_of([&] { c->reduce_scatter(at::ones({3 * c->size() + 1}, f), at::empty({3}, f)); }), Contains("reduce_scatter: in has"));
  CHECK_THAT(error_of([&] { c->all_reduce(at::ones({4, 4}, f).t()); }), Contains("contiguous"));
  CHECK_THAT(error_of([&] { c->all_reduce(at::ones({4}, at::kInt)); }), Contains("dtype Int"));
  CHECK_THAT(error_of([&] { c->all_gather(at::ones({3}, f), at::empty({3 * c->size()}, at::kDouble)); }), Contains("dtype"));
  CHECK_THAT(error_of([&] { c->broadcast(at::ones({3}, f), c->size()); }), Contains("root"));
  CHECK_THAT(error_of([&] { c->send(at::ones({3}, f), c->rank()); }), Contains("this rank itself"));
  CHECK_THAT(error_of([&] { c->recv(at::ones({3}, f), -1); }), Contains("not a rank of this group"));
  at::Tensor buf = at::zeros({4 * c->size()}, f);
  if (c->size() > 1)
    CHECK_THAT(error_of([&] { c->all_gather(buf.narrow(0, 1, 4), buf); }), Contains("overlap"));

  // Group lists are checked the same way on every rank.
  std::vector<int> all;
  for (int r = 0; r < w.size; ++r) all.push_back(r);
  std::vector<int> missing_last(all.begin(), all.end() - 1);
  if (w.size > 1)
    CHECK_THAT(error_of([&] { rt::make_communicator({missing_last}, "x", at::kCPU, kTimeout); }), Contains("is in no group"));
  CHECK_THAT(error_of([&] { rt::make_communicator({all, {0}}, "x", at::kCPU, kTimeout); }), Contains("more than one group"));
  CHECK_THAT(error_of([&] { rt::make_communicator({all, {w.size}}, "x", at::kCPU, kTimeout); }), Contains("names rank"));
  CHECK_THAT(error_of([&] { rt::make_communicator({all}, "x", at::kCPU, std::chrono::seconds(0)); }), Contains("timeout must be positive"));
  if (!rt::has_nccl())
    CHECK_THAT(error_of([&] { rt::make_communicator({all}, "x", at::Device(at::kCUDA, 0), kTimeout); }), Contains("this build has no NCCL"));
  c->barrier();
}

TEST_CASE("world info and launch detection", "[dist][comm]") {
  const auto w = world();
  CHECK(rt::world_initialized());
  CHECK(w.rank >= 0);
  CHECK(w.rank < w.size);
  CHECK(w.local_rank < w.local_size);
  CHECK(w.local_size <= w.size);
  CHECK_FALSE(w.hostname.empty());
  if (w.size > 1) CHECK(rt::launched_by_mpi());
}
