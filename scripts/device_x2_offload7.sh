#!/usr/bin/env bash
# One nvidia-h100-x2 call after the host AdamW went tile by tile (issue 10):
# calibrate this host, predict before anything runs, run the held-out offload
# set 7, then the five offload plans of held-out set 6 again (not held out:
# they ran before the change). No --kernels: the offload steps' time is the
# host's. scripts/device_x2_same_host.sh does the work.
#   OUT=/some/dir bash scripts/device_x2_offload7.sh
exec bash scripts/device_x2_same_host.sh \
  'offload7-2gpu|examples/sweep_h100x2_offload_heldout7.json|2gpu||0' \
  'offload7-1gpu|examples/sweep_h100_offload_heldout7.json|1gpu||0' \
  'rerun6-2gpu|examples/sweep_h100x2_heldout6.json|2gpu|opt-2.7b-dp2-z2-offload-opt-selective,llama3.2-3b-dp2-z3-offload-all-full|0' \
  'rerun6-1gpu|examples/sweep_h100_heldout6.json|1gpu|neo-1.3b-offload-opt-selective,tinyllama-z3-offload-all-fp16,llama3.2-3b-offload-opt-full|0'
