#!/usr/bin/env bash
# One nvidia-h200-x2 call after calibrate's CPU AdamW benchmark became the
# Engine's own code path (issue 10): calibrate this host, predict the held-out
# offload sets before any plan runs, run them (--kernels), then the three
# offload plans of the third held-out set again (not held out: they ran
# before). scripts/device_x2_same_host.sh does the work.
#   OUT=/some/dir bash scripts/device_x2_offload4.sh
exec bash scripts/device_x2_same_host.sh \
  'offload4-2gpu|examples/sweep_h200x2_offload_heldout4.json|2gpu||1' \
  'offload4-1gpu|examples/sweep_h200_offload_heldout4.json|1gpu||1' \
  'rerun3-2gpu|examples/sweep_h200x2_heldout3.json|2gpu|tinyllama-dp2-z2-offload-opt-fp16,gpt2-xl-dp2-z3-offload-all|0' \
  'rerun3-1gpu|examples/sweep_h200_heldout3.json|1gpu|opt-1.3b-offload-opt-fp16|0'
