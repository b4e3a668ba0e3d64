#pragma once
// The training engines a plan can be run with: this project's runtime ("ours"),
// DeepSpeed, Megatron-LM and PyTorch's own distributed training (DDP, FSDP2).
// The strategy is the same; what each engine can express, and what it
// allocates for it, differs. Versions targeted (see docs/MEMORY_MODEL.md,
// "Engines"): DeepSpeed 0.19.8, Megatron-LM core_v0.19.0, PyTorch 2.13.
#include <string>
#include <string_view>

#include "specs/plan.hpp"

namespace planner {

enum class Engine { Ours, DeepSpeed, Megatron, Fsdp };

const char* to_string(Engine e);            // "ours", "deepspeed", "megatron", "fsdp"
Engine parse_engine(std::string_view text);  // InputError naming the choices
// The release whose sources and documentation the rules and the memory model cite.
const char* engine_version(Engine e);

// Empty when `engine` can run the plan's strategy and model as planned;
// otherwise one line saying what the engine lacks ("Megatron-LM runs 1F1B or
// interleaved 1F1B pipelines, not GPipe"). Ours runs everything check_compat
// accepts.
// `env`: what is installed beside the engine where it runs (the export
// cannot see it; the user says so with --with-te).
struct EngineEnv {
  // Transformer Engine (or apex) beside Megatron-core: without either its
  // local layer spec cannot run sequence parallelism.
  bool transformer_engine = false;
};
std::string engine_gap(const Plan& plan, Engine engine, const EngineEnv& env = {});

// What the engine's measured peaks showed against `--engine`'s memory and the
// model does not explain yet (validation/engines/README.md), one line for
// every answer that prints that engine's memory (memory, predict and plan
// with --engine); empty where nothing is known to be off.
std::string engine_memory_note(Engine engine, const EngineEnv& env = {});

// Megatron-LM pads the vocabulary to a multiple of make_vocab_size_divisible_by
// (128) times tp (megatron/training/vocab_utils.py, calculate_padded_vocab_size).
int64_t megatron_padded_vocab(int64_t vocab, int tp);

}  // namespace planner
