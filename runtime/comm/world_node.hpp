#pragma once
// The node this rank runs on, as init_world() found it (runtime/comm/world.cpp):
// a number shared by the ranks of one node and distinct between nodes:
// PLANNER_NODE where set (several "nodes" emulated on one host), else Slurm's
// SLURM_NODEID, else the lowest world rank among the ranks that share memory.
// The local rank and size of WorldInfo are among the ranks of that node.
// 0 before init_world().
namespace planner::rt {

int world_node_key();

}  // namespace planner::rt
