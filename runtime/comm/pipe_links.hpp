#pragma once
// Point-to-point links between pipeline stages: one communicator per directed
// edge of the pipeline and per direction of travel (activations forward,
// gradients backward), so that every communicator carries messages one way
// between two ranks, in one order, on its own stream.
//
// Why not one pp communicator: NCCL runs a communicator's operations in issue
// order on one stream, and a send of more than NCCL's buffer waits for the
// receiver to post its receive. With one stream per rank for both directions,
// 1F1B deadlocks when neighbours both send first (Megatron-LM batches those
// pairs into one NCCL group for that reason), and the interleaved schedule,
// whose last stage sends back to the first, deadlocks in a cycle of sends.
// With one communicator per edge and direction, a link's stream holds only
// sends (on the sending rank) or only receives (on the receiving rank); a send
// waits only for the compute that produced its tensor, a receive for nothing
// but the receives before it on the same link, so the step runs whenever it
// would with unbounded buffering (MPI's non-blocking sends). The MPI backend
// gets exact message matching from the same split (one order per link).
//
// Communicators are made in rounds, each round a matching of the ring's edges
// (no two edges of a round share a rank, so every rank is in at most one pair;
// ranks in none form a group of one): edge s joins stages s -> s+1 (mod pp).
// Rounds: edges of even s, edges of odd s, and for an odd pp with the
// wrap-around edge, that edge alone. Forward and backward edges are separate
// rounds. Every rank makes the same rounds in the same order (a collective
// over the world), which depends only on pp and on `ring`.
#include <memory>
#include <vector>

#include "runtime/comm/communicator.hpp"

namespace planner::rt {

struct PipeLinks {
  // Peer 1 of an out link is the receiver, peer 0 of an in link the sender.
  Communicator* f_out = nullptr;  // activations to stage + 1
  Communicator* f_in = nullptr;   // activations from stage - 1
  Communicator* b_out = nullptr;  // gradients to stage - 1
  Communicator* b_in = nullptr;   // gradients from stage + 1
  std::vector<std::unique_ptr<Communicator>> owned;
};

// `pp`: this rank's pipeline group (members in stage order). `ring`: the last
// stage also sends to the first (the interleaved schedule). Collective over the
// world; every rank passes a pp group of the same size and the same `ring`.
PipeLinks make_pipe_links(const Communicator& pp, bool ring, at::Device device);

// The rounds above, for tests: per round, the edges it holds (edge s = s -> s+1).
std::vector<std::vector<int>> pipe_link_rounds(int pp, bool ring);

}  // namespace planner::rt
