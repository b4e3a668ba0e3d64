#!/usr/bin/env bash
# One rank of an mpirun launch on one multi-GPU host, run as if the host were
# several nodes of PER ranks each (issue 30: the multi-node path, emulated):
#
#   mpirun -np 4 bash scripts/emulate_nodes.sh 2 planner calibrate -o two-nodes.json
#
# Rank r (OMPI_COMM_WORLD_RANK, or Slurm's SLURM_PROCID) is on "node" r / PER:
#  - PLANNER_NODE gives the planner its node, as SLURM_NODEID does on a cluster
#    (runtime/comm/world.cpp: the local rank and size are then among that
#    node's ranks);
#  - CUDA_VISIBLE_DEVICES shows it only its node's GPUs (node n: PER*n ..
#    PER*n+PER-1), so local rank i takes the node's GPU i, as on a real node;
#  - NCCL_HOSTID makes NCCL take each "node" for a host of its own: between
#    nodes it uses its network transport (peer-to-peer and shared memory need
#    the same host), inside a node NVLink as before. NCCL_P2P_DISABLE and
#    NCCL_SHM_DISABLE would not do: they turn NVLink and shared memory off
#    inside the node too.
#  - NCCL_IB_DISABLE=1 and NCCL_SOCKET_IFNAME=lo (unless set): the network
#    transport is TCP sockets over loopback, which every host has.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: emulate_nodes.sh PER COMMAND..." >&2; exit 2; }
per=$1; shift
case "$per" in ''|*[!0-9]*) echo "emulate_nodes.sh: PER '$per' is not a number of ranks" >&2; exit 2;; esac
[ "$per" -ge 1 ] || { echo "emulate_nodes.sh: PER must be at least 1" >&2; exit 2; }
rank=${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:-${PMI_RANK:-}}}
[ -n "$rank" ] || { echo "emulate_nodes.sh: not started by mpirun/srun (no OMPI_COMM_WORLD_RANK)" >&2; exit 2; }
node=$((rank / per))
export PLANNER_NODE=$node
export NCCL_HOSTID="planner-emulated-node-$node"
export CUDA_VISIBLE_DEVICES=$(seq -s, $((node * per)) $((node * per + per - 1)))
export NCCL_IB_DISABLE=1
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
exec "$@"
