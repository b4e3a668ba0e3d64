#pragma once
// `planner validate --rank-question "--model M --gpus G --global-batch B" --top K`:
// the ranking check. The top K plans of that `plan` question (the same search,
// with the same profile the predictions use) run as a sweep; the report then
// says whether `plan`'s pick was the measured best, how far the pick is from
// the measured best, and how well the predicted order agrees with the measured
// one (Kendall's tau-b). Running the plans is planner/cmd_validate.cpp's, as
// for any sweep. No LibTorch here.
#include <nlohmann/json.hpp>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "costmodel/hardware_profile.hpp"
#include "planner/validate.hpp"

namespace planner {

// A `plan` question as --rank-question gives it: only what shapes the search.
struct RankQuestion {
  std::string model, gpus, seq, global_batch, host_memory;
};

// Parses "--model M --gpus G [--seq S] [--global-batch B] [--host-memory H]"
// (also -m, -g and --key=value); InputError naming the word it cannot take.
RankQuestion parse_rank_question(const std::string& text);

// The question's top `top` plans, best first, as a sweep: plans "rank1" ..
// "rankK", all half "B" (held out: nothing of a ranking run is fitted).
// `profile_of` gives the profile for the question's GPU, the one every
// prediction of the report uses, so the search ranks with it too. InputError
// when the question is malformed, names several clusters, or nothing fits.
struct RankSweep {
  Sweep sweep;
  std::string question;  // as given
  std::vector<std::string> notes;  // the search's notes
  double tie_threshold_pct = 0;    // planner/plan_rank.hpp tie_rule of the question's GPU
  std::string tie_reason;
};
RankSweep ranking_sweep(const std::string& question, int top, const std::string& sweep_path,
                        const std::function<HardwareProfile(const GpuSpec&)>& profile_of);

// Kendall's tau-b of two paired lists (Kendall 1945, "The treatment of ties in
// ranking problems", Biometrika 33(3)): (concordant - discordant) pairs over
// sqrt((n0 - ties in x)(n0 - ties in y)), n0 = n(n-1)/2. nullopt when there are
// fewer than two pairs or every pair is tied in one of the lists (undefined).
std::optional<double> kendall_tau_b(const std::vector<double>& x, const std::vector<double>& y);

// report.json's "ranking" from its plans (in predicted order, best first):
// per plan its predicted rank, predicted and measured step, measured rank and
// gap to the measured best; the pick (predicted rank 1), whether it is the
// measured best, its measured gap to the best in percent, and Kendall's tau-b
// between predicted and measured step times over the plans that ran. With
// `tie_threshold_pct` > 0, also `plan`'s tie groups (plan_rank.hpp tie_groups
// of the predicted step times): each row's `tie_group`, the pick's
// `pick_tied_with` and `best_tied_with_pick` (the measured best was in the
// pick's group: `plan` showed them as tied, not as an order).
nlohmann::json ranking_summary(const nlohmann::json& plans, double tie_threshold_pct = 0,
                               const std::string& tie_reason = "");

// The ranking's table and summary lines.
std::string ranking_table(const nlohmann::json& ranking);

}  // namespace planner
