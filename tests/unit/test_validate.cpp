// planner validate's report arithmetic (planner/validate.hpp) with known numbers,
// and the sweep file's checks.
#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <algorithm>
#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "planner/exec_report.hpp"
#include "planner/validate.hpp"
#include "test_util.hpp"

using namespace planner;
using nlohmann::json;
using test_util::contains;
using test_util::error_of;

namespace {

StepPrediction prediction(double step, int64_t peak, bool fits) {
  StepPrediction p;
  p.step_seconds = step;
  StageMemory st;
  st.gpu[int(MemCategory::Parameters)] = 40;
  st.gpu[int(MemCategory::Activations)] = peak - 40;
  st.gpu_peak_bytes = peak;
  p.memory.stages = {st};
  p.memory.per_gpu_peak_bytes = peak;
  p.memory.gpu_capacity_bytes = 1000;
  p.memory.gpu_fits = fits;
  p.memory.host_fits = true;
  return p;
}

json result(double median, int64_t total, std::vector<int64_t> rank_peaks) {
  json ranks = json::array();
  for (size_t r = 0; r < rank_peaks.size(); ++r) ranks.push_back({{"rank", r}, {"peak_bytes", rank_peaks[r]}});
  return {{"measurement",
           {{"step_seconds", {{"median", median}}},
            {"tokens_per_second", 1000.0},
            {"ranks", ranks},
            {"memory", {{"total_bytes", total}, {"categories", {{"parameters", 40}, {"activations", 50}}}}}}}};
}

SweepEntry entry(const std::string& name, const std::string& half) {
  SweepEntry e;
  e.name = name, e.half = half;
  e.plan.strategy.dp = 2;
  e.plan.model.name = "m";
  return e;
}

std::string write(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p) << text;
  return p.string();
}

}  // namespace

TEST_CASE("validate: errors are (predicted - measured) / measured, peak from the fullest rank", "[validate]") {
  RunOutcome run;
  run.status = "ran";
  run.result = result(1.0, 90, {100, 95});  // rank 0's total 90, the fullest rank 100
  const json r = plan_record(entry("a", "A"), prediction(1.1, 105, true), "", run);
  CHECK(r["world"] == 2);
  CHECK(r["predicted"]["step_seconds"].get<double>() == Approx(1.1));
  CHECK(r["measured"]["step_seconds"].get<double>() == Approx(1.0));
  CHECK(r["measured"]["per_gpu_peak_bytes"] == 100);
  CHECK(r["errors"]["step_seconds_pct"].get<double>() == Approx(10.0));
  CHECK(r["errors"]["per_gpu_peak_pct"].get<double>() == Approx(5.0));
  // Categories where both exist: parameters 40 / 40, activations 65 / 50.
  CHECK(r["errors"]["categories_pct"]["parameters"].get<double>() == Approx(0.0));
  CHECK(r["errors"]["categories_pct"]["activations"].get<double>() == Approx(30.0));
  // Not run: no measured side, no errors.
  const json n = plan_record(entry("b", "B"), prediction(2, 50, false), "", RunOutcome{});
  CHECK(n["measured"].is_null());
  CHECK(n["errors"]["step_seconds_pct"].is_null());
  CHECK(n["status"] == "not_run");
}

TEST_CASE("validate: a pipeline run's categories are its fullest rank's", "[validate]") {
  // Rank 0 (stage 0, no head) peaks at 90, rank 1 (the head) at 100 with its
  // own categories: those are compared with the predicted fullest stage.
  RunOutcome run;
  run.status = "ran";
  run.result = result(1.0, 90, {90, 100});
  (*run.result)["measurement"]["ranks"][1]["categories"] = {{"parameters", 40}, {"activations", 30}, {"logits_loss", 30}};
  const json r = plan_record(entry("pp", "A"), prediction(1.0, 100, true), "", run);
  CHECK(r["measured"]["categories_rank"] == 1);
  CHECK(r["measured"]["categories"]["logits_loss"] == 30);
  CHECK(r["measured"]["per_gpu_peak_bytes"] == 100);
  // predicted activations 60 against rank 1's 30: the largest difference, named with its rank.
  CHECK(r["causes"]["memory"]["category"] == "activations");
  CHECK(r["causes"]["memory"]["difference_bytes"].get<double>() == Approx(30));
  CHECK(contains(r["causes"]["memory"]["text"].get<std::string>(), "(rank 1)"));
  // Without the ranks' own categories (older results): rank 0's.
  run.result = result(1.0, 90, {90, 100});
  const json old = plan_record(entry("pp", "A"), prediction(1.0, 100, true), "", run);
  CHECK(old["measured"]["categories_rank"] == 0);
  CHECK(old["measured"]["categories"]["activations"] == 50);
}

TEST_CASE("validate: the causes of a miss from the run's own actions", "[validate]") {
  // Offload plan: predicted 1.0 s with 0.6 s of forward+backward; measured 1.25 s
  // with F 0.2 + B 0.4 = 0.6 s: the 0.25 s miss is all in the rest of the step.
  StepPrediction pred = prediction(1.0, 100, true);
  pred.compute_seconds = 0.6;
  RunOutcome run;
  run.status = "ran";
  run.result = result(1.25, 100, {100});
  (*run.result)["measurement"]["action_seconds"] = {{"F", 0.2}, {"B", 0.4}, {"D", 0.6}};
  (*run.result)["measurement"]["cpu_adam_params_per_second"] = 2.0e9;
  (*run.result)["measurement"]["host_copy_gbps"] = 70.0;
  const json r = plan_record(entry("o", "A"), pred, "", run, 2.5e9);
  const json& c = r["causes"]["step"];
  CHECK(c["compute_measured"].get<double>() == Approx(0.6));
  CHECK(c["rest_predicted"].get<double>() == Approx(0.4));
  CHECK(c["rest_measured"].get<double>() == Approx(0.65));
  CHECK(c["larger"] == "rest");
  CHECK(contains(c["text"].get<std::string>(), "CPU AdamW 2e+09 parameters/s (profile 2.5e+09/s, +25%)"));
  CHECK(contains(c["text"].get<std::string>(), "host memcpy 70 GB/s"));
  // Two processes on the node: the profile's rate is the node's, each gets half.
  SweepEntry two = entry("o2", "A");
  two.plan.cluster.gpus_per_node = 2;
  const json r2 = plan_record(two, pred, "", run, 5.0e9);
  CHECK(contains(r2["causes"]["step"]["text"].get<std::string>(),
                 "CPU AdamW 2e+09 parameters/s (profile 5e+09/s per node, 2.5e+09/s per process: +25%)"));
  // Memory: predicted activations 60 against 50 measured is the largest difference.
  CHECK(r["causes"]["memory"]["category"] == "activations");
  CHECK(r["causes"]["memory"]["difference_bytes"].get<double>() == Approx(10));
  // A compute-bound miss: F+B 0.9 s measured against 0.6 predicted.
  (*run.result)["measurement"]["action_seconds"] = {{"F", 0.3}, {"B", 0.6}};
  (*run.result)["measurement"]["step_seconds"]["median"] = 1.3;
  CHECK(plan_record(entry("c", "A"), pred, "", run)["causes"]["step"]["larger"] == "compute");
  // The collectives' slowdown: predicted, and measured beside the NCCL kernels.
  {
    StepPrediction pc = pred;
    pc.contention_seconds = 0.05;
    RunOutcome rk = run;
    (*rk.result)["measurement"]["kernels"] = {
        {"beside_collectives", {{"compute_beside_seconds", 0.12}, {"slowdown", 1.16}}}};
    const json c2 = plan_record(entry("k", "A"), pc, "", rk)["causes"]["step"];
    CHECK(c2["beside_collectives"]["contention_predicted"].get<double>() == Approx(0.05));
    CHECK(contains(c2["text"].get<std::string>(),
                   "beside the DP/ZeRO collectives: 0.0500 s of slowdown predicted, 0.1200 s of compute kernels "
                   "measured beside NCCL kernels (1.16x the same kernels alone, by name)"));
    // Neither predicted nor measured: nothing said.
    CHECK(!plan_record(entry("k0", "A"), pred, "", run)["causes"]["step"].contains("beside_collectives"));
  }
  // The table names the cause for a plan missing by more than 4%.
  json plans = json::array({r});
  json report = {{"sweep_name", "t"}, {"steps", 2}, {"warmup", 1}, {"held_out", "B"}, {"plans", plans},
                 {"summary", summarize(plans, "B")}};
  CHECK(contains(report_table(report), "o step -20.0%: mostly the rest of the step"));
  // Not run: no causes.
  CHECK(plan_record(entry("n", "B"), pred, "", RunOutcome{})["causes"].is_null());
}

TEST_CASE("validate: MAPE and worst per half, and the fit verdicts", "[validate]") {
  auto ran = [](const std::string& name, const std::string& half, double pred_step, double pred_peak) {
    RunOutcome run;
    run.status = "ran";
    run.result = result(1.0, 100, {100});
    return plan_record(entry(name, half), prediction(pred_step, int64_t(pred_peak), true), "", run);
  };
  json plans = json::array({ran("a1", "A", 1.10, 102), ran("a2", "A", 0.80, 97), ran("b1", "B", 1.05, 101)});
  RunOutcome oom;
  oom.status = "out_of_memory";
  oom.error = "planner: error: CUDA out of memory while running the plan";
  plans.push_back(plan_record(entry("b2", "B"), prediction(1, 990, false), "", oom));
  const json s = summarize(plans, "B");
  // Step errors: A +10, -20 -> MAPE 15, worst -20 (a2); B +5; all 35 / 3.
  CHECK(s["A"]["step_seconds"]["mape_pct"].get<double>() == Approx(15.0));
  CHECK(s["A"]["step_seconds"]["worst_pct"].get<double>() == Approx(-20.0));
  CHECK(s["A"]["step_seconds"]["worst_plan"] == "a2");
  CHECK(s["B"]["step_seconds"]["mape_pct"].get<double>() == Approx(5.0));
  CHECK(s["all"]["step_seconds"]["mape_pct"].get<double>() == Approx(35.0 / 3));
  // Peak errors: +2, -3, +1.
  CHECK(s["A"]["per_gpu_peak"]["mape_pct"].get<double>() == Approx(2.5));
  CHECK(s["all"]["per_gpu_peak"]["worst_pct"].get<double>() == Approx(-3.0));
  CHECK(s["B"]["held_out"] == true);
  CHECK(s["A"]["held_out"] == false);
  CHECK(s["B"]["plans"] == 2);
  CHECK(s["B"]["ran"] == 1);
  CHECK(s["all"]["fit_checks"]["predicted_fit_ran"] == 3);
  CHECK(s["all"]["fit_checks"]["predicted_unfit_out_of_memory"] == 1);
  CHECK(s["all"]["fit_checks"]["predicted_fit_out_of_memory"] == 0);

  json report = {{"sweep_name", "t"}, {"steps", 2}, {"warmup", 1}, {"held_out", "B"}, {"plans", plans}, {"summary", s}};
  const std::string csv = report_csv(report);
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 5);  // header + 4 plans
  CHECK(contains(csv, "\"a2\",A,2,"));
  CHECK(contains(csv, ",out_of_memory,false,"));
  const std::string table = report_table(report);
  CHECK(contains(table, "half B (held out): 1 of 2 ran; step time MAPE 5.0%"));
  CHECK(contains(table, "b2: out_of_memory: planner: error: CUDA out of memory"));
  const PlotFiles pf = plot_files(report);
  CHECK(contains(pf.script, "step_time.png"));
  CHECK(contains(pf.script, "memory_breakdown.png"));
  CHECK(contains(pf.script, "0.95*$1"));  // the 5% band
}

TEST_CASE("validate draws a pipeline plan's predicted and measured timelines from its exec trace", "[validate]") {
  using nlohmann::json;
  // Two stages predicted (pid = stage, thread 0 = compute) and two ranks
  // measured (pid 1000 + rank, named with their stage), as exec_trace_json
  // writes them; the per-layer actions of one pass merge into one box.
  // Each event's args carry its action's op and micro-batch (what the plot
  // goes by; the names are for the eye).
  auto x = [](int pid, const std::string& name, const char* op, double ts_us, double dur_us, int mb = -1,
              int tid = 0) {
    json e = {{"ph", "X"}, {"pid", pid}, {"tid", tid}, {"name", name}, {"ts", ts_us}, {"dur", dur_us}};
    e["args"] = {{"op", op}, {"microbatch", mb}};
    return e;
  };
  auto meta = [](int pid, const std::string& name) {
    json args = {{"name", name}};
    if (pid >= 1000) args["stage"] = pid - 1000;  // exec writes a measured rank's stage as a number
    return json{{"ph", "M"}, {"pid", pid}, {"tid", 0}, {"name", "process_name"}, {"args", args}};
  };
  json ev = json::array({meta(0, "stage 0 (representative rank)"), meta(1, "stage 1 (representative rank)"),
                         meta(1000, "measured rank 0, stage 0 (compute stream)"),
                         meta(1001, "measured rank 1, stage 1 (compute stream)"),
                         // stage 0: F0 over two layers, then B0; a p2p send on thread 2 (not drawn)
                         x(0, "F 0 u0", "F", 0, 1000, 0), x(0, "F 0 u1", "F", 1000, 1000, 0),
                         x(0, "B 0 u1", "B", 5000, 2000, 0), x(0, "send activation 0", "SF", 2000, 100, 0, 2),
                         x(1, "F 0 u2", "F", 2100, 1000, 0), x(1, "B 0 u2", "B", 3100, 1900, 0),
                         x(1, "optimizer", "Opt", 7000, 500),
                         // measured: rank 0 F0 (two layers), a wait for stage 1's gradient, B0, the optimizer
                         x(1000, "0F0.0", "F", 0, 1100, 0), x(1000, "0F0.1", "F", 1100, 1100, 0),
                         x(1000, "0RB0", "RB", 2200, 3000, 0), x(1000, "0B0.1", "B", 5200, 1000, 0),
                         x(1000, "0AR1", "Red", 6200, 0.2), x(1000, "0B0.0", "B", 6200, 1100, 0),
                         x(1000, "0Opt", "Opt", 7300, 600), x(1001, "1F0.2", "F", 2300, 1000, 0),
                         x(1001, "1B0.2", "B", 3300, 2000, 0), x(1001, "1Sync", "Sync", 5300, 100)});
  // A Release ("0R1") is not a recompute, and no name is read back: an
  // event without args.op is "other".
  CHECK(trace_event_kind(x(1000, "0R1", "R", 0, 1)).first == 5);
  CHECK(trace_event_kind(json{{"name", "F 3"}, {"ph", "X"}}).first == 5);
  CHECK(trace_event_kind(x(0, "anything", "B", 0, 1, 4)) == std::pair<int, int>{1, 4});
  const json trace = {{"traceEvents", ev}, {"otherData", {{"title", "t"}, {"makespan_seconds", 0.0075}, {"measured_step_seconds", 0.0079}}}};
  json plan = {{"name", "pp/2"}, {"half", "A"}, {"predicted", nullptr}, {"measured", {{"step_seconds", 0.0079}, {"per_gpu_peak_bytes", 1e9}}}};
  const json report = {{"sweep_name", "t"}, {"held_out", "B"}, {"plans", json::array({plan})}};
  const PlotFiles pf = plot_files(report, {{"pp/2", trace}});
  REQUIRE(std::find(pf.pngs.begin(), pf.pngs.end(), "timeline_pp_2.png") != pf.pngs.end());
  CHECK(contains(pf.script, "set output \"timeline_pp_2.png\""));
  CHECK(contains(pf.script, "\"stage 0 predicted\" 0, \"rank 0 measured\" 1, \"stage 1 predicted\" 2, \"rank 1 measured\" 3"));
  CHECK(contains(pf.script, "predicted step 0.0075 s, measured 0.0079 s"));
  std::string dat;
  for (const auto& [n, t] : pf.data)
    if (n == "timeline_pp_2.dat") dat = t;
  // lane start_ms end_ms colour label: forward 0x4575b4 = 4552116, backward
  // 0xfc8d59 = 16551257, a neighbour wait 0xc8c8c8 = 13158600, the
  // optimizer 0x1a9850 = 1742928, other 0x7f7f7f = 8355711. Micro-batch
  // labels only on boxes wider than 1.2% of the span.
  CHECK(contains(dat, "0 0.000000 2.000000 4552116 \"0\"\n"));   // stage 0's two F layers, one box
  CHECK(contains(dat, "0 5.000000 7.000000 16551257 \"0\"\n"));
  CHECK(contains(dat, "1 0.000000 2.200000 4552116 \"0\"\n"));   // rank 0's F, merged
  CHECK(contains(dat, "1 2.200000 5.200000 13158600 \"\"\n"));   // waiting for the gradient from stage 1
  CHECK(contains(dat, "1 5.200000 7.300000 16551257 \"0\"\n"));  // B over an all-reduce's issue: one box
  CHECK(contains(dat, "1 7.300000 7.900000 1742928 \"\"\n"));
  CHECK(contains(dat, "2 7.000000 7.500000 1742928 \"\"\n"));
  CHECK(contains(dat, "3 5.300000 5.400000 8355711 \"\"\n"));
  CHECK(!contains(dat, "0.100000 4552116"));                        // the p2p thread is not drawn
  CHECK(std::count(dat.begin(), dat.end(), '\n') == 1 + 2 + 4 + 3 + 3);  // header + boxes per lane
  // No trace: no timeline.
  // The bubble of each stage: the step less its passes and optimizer. Stage 0
  // predicted 7.5 - (2 + 2) = 3.5 ms, stage 1 7.5 - (1 + 1.9 + 0.5) = 4.1 ms;
  // measured (7.9 ms) rank 0 7.9 - (2.2 + 2.1 + 0.6) = 3.0 ms (its wait for
  // the gradient and the all-reduce's issue are not passes), rank 1
  // 7.9 - (1 + 2) = 4.9 ms (its Sync is not one either).
  const json b = pipeline_bubble(trace);
  REQUIRE(b.is_object());
  REQUIRE(b["stages"].size() == 2);
  CHECK(b["stages"][0]["stage"] == 0);
  CHECK(b["stages"][0]["predicted_seconds"].get<double>() == Approx(3.5e-3));
  CHECK(b["stages"][0]["predicted_fraction"].get<double>() == Approx(3.5 / 7.5));
  REQUIRE(b["stages"][0]["measured"].size() == 1);
  CHECK(b["stages"][0]["measured"][0]["rank"] == 0);
  CHECK(b["stages"][0]["measured"][0]["seconds"].get<double>() == Approx(3.0e-3));
  CHECK(b["stages"][1]["predicted_seconds"].get<double>() == Approx(4.1e-3));
  CHECK(b["stages"][1]["measured"][0]["seconds"].get<double>() == Approx(4.9e-3));
  CHECK(b["stages"][1]["measured"][0]["fraction"].get<double>() == Approx(4.9 / 7.9));
  CHECK(pipeline_bubble(json::array()).is_null());
  CHECK(pipeline_bubble(json{{"traceEvents", json::array()}}).is_null());  // no step figures
  // The table prints it.
  json with = report;
  with["plans"][0]["bubble"] = b;
  with["plans"][0]["errors"] = {{"step_seconds_pct", nullptr}, {"per_gpu_peak_pct", nullptr}};
  with["plans"][0]["world"] = 2;
  with["plans"][0]["strategy"] = "pp=2";
  with["plans"][0]["status"] = "ran";
  with["plans"][0]["error"] = nullptr;
  with["summary"] = summarize(with["plans"], "B");
  CHECK(contains(report_table(with), "  pp/2: stage 0 0.0035 s (46.7%) / 0.0030 s (38.0%); stage 1 0.0041 s (54.7%) / 0.0049 s (62.0%)\n"));
  // Without the trace no timeline (and with nothing predicted no other picture).
  CHECK(plot_files(report).pngs.empty());
  // A trace that is not exec's draws nothing and throws nothing.
  for (const json& bad : {json::array(), json{{"traceEvents", 3}},
                          json{{"traceEvents", json::array({json{{"ph", "M"}, {"pid", "x"}}, json{{"ph", "X"}, {"pid", 0}}})}}})
    CHECK(plot_files(report, {{"pp/2", bad}}).pngs.empty());
}

TEST_CASE("validate: a bad sweep is refused with one line naming the plan", "[validate]") {
  const auto dir = std::filesystem::temp_directory_path() / ("planner-sweep-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  write(dir / "tiny.json", R"({"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 128, "vocab_size": 512})");
  const std::string head = R"({"format": "planner-sweep", "version": 1, "defaults": {"gpus": "1xH100", "seq": 64}, "plans": [)";
  // A model path is relative to the sweep file.
  const Sweep ok = load_sweep(write(dir / "ok.json", head + R"({"name": "t", "half": "A", "model": "tiny.json", "strategy": "mbs=2,gas=2", "global_batch": 4}]})"));
  REQUIRE(ok.entries.size() == 1);
  CHECK(ok.entries[0].plan.model.layers == 2);
  CHECK(ok.entries[0].plan.seq == 64);
  CHECK(ok.held_out == "B");
  CHECK(ok.entries[0].plan.cluster.gpu.name == "H100-SXM");
  // --gpus: the same sweep on another GPU kind.
  CHECK(load_sweep((dir / "ok.json").string(), "1xH200").entries[0].plan.cluster.gpu.name == "H200");
  const std::string bad_half = write(dir / "b1.json", head + R"({"name": "t", "half": "C", "model": "tiny.json"}]})");
  CHECK(contains(error_of([&] { load_sweep(bad_half); }), "plan 't': \"half\" must be"));
  const std::string dup = write(dir / "b2.json", head + R"({"name": "t", "half": "A", "model": "tiny.json"}, {"name": "t", "half": "B", "model": "tiny.json"}]})");
  CHECK(contains(error_of([&] { load_sweep(dup); }), "used twice"));
  const std::string typo = write(dir / "b3.json", head + R"({"name": "t", "half": "A", "modle": "tiny.json"}]})");
  CHECK(contains(error_of([&] { load_sweep(typo); }), "did you mean 'model'"));
  const std::string bad_plan = write(dir / "b4.json", head + R"({"name": "t", "half": "A", "model": "tiny.json", "strategy": "dp=3"}]})");
  CHECK(contains(error_of([&] { load_sweep(bad_plan); }), "plan 't': "));
  const std::string slash = write(dir / "b5.json", head + R"({"name": "a/b", "half": "A", "model": "tiny.json"}]})");
  CHECK(contains(error_of([&] { load_sweep(slash); }), "names files"));
  CHECK(contains(error_of([&] { load_sweep((dir / "missing.json").string()); }), "missing.json"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("exec --kernels: each op class, predicted beside measured, the same for exec's rows and validate's causes",
          "[validate]") {
  StepPrediction p;
  p.compute_by_class.gemm_seconds = 0.5;
  p.compute_by_class.attention_seconds = 0.1;
  p.compute_by_class.memory_seconds = 0.3;
  p.compute_by_class.tp_comm_seconds = 0.05;  // not a kernel class of one GPU's compute stream
  // exec --kernels records rank 0: its stage's classes are the ones compared
  // (here the critical stage's are another's: a pipeline).
  p.compute_by_class_rank0 = p.compute_by_class;
  p.compute_by_class = 2.0 * p.compute_by_class;
  CHECK(kernel_class_comparison(p, nlohmann::json{{"kernels", nullptr}}).is_null());
  const nlohmann::json m = {
      {"kernels",
       {{"by_class",
         {{"gemm_seconds", 0.4}, {"attention_seconds", 0.125}, {"memory_bound_seconds", 0.3},
          {"host_copy_seconds", 0.01}, {"communication_seconds", 0.2}}},
        {"busy_seconds", 0.825},
        {"span_seconds", 0.85},
        {"idle_seconds", 0.025}}}};
  const nlohmann::json c = kernel_class_comparison(p, m);
  // GEMM + attention + memory-bound + the TP collectives the compute stream waits for (in the measured span)
  CHECK(c["forward_backward"]["predicted"].get<double>() == Approx(0.95));
  CHECK(c["forward_backward"]["measured"].get<double>() == Approx(0.85));
  CHECK(c["gemm"]["predicted"].get<double>() == Approx(0.5));
  CHECK(c["gemm"]["measured"].get<double>() == Approx(0.4));
  CHECK(c["attention"]["measured"].get<double>() == Approx(0.125));
  CHECK(c["memory_bound"]["predicted"].get<double>() == Approx(0.3));
  CHECK(c["communication"]["predicted"].is_null());
  CHECK(c["communication"]["measured"].get<double>() == Approx(0.2));
  CHECK(c["idle"]["predicted"].is_null());
  CHECK(c["idle"]["measured"].get<double>() == Approx(0.025));
  CHECK(c["host_copy"]["measured"].get<double>() == Approx(0.01));
}
