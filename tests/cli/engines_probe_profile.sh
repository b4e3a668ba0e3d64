#!/usr/bin/env bash
# scripts/engines/probe_to_profile.py reads the compiled-in engine host
# constants and the tiny model's counts from `planner predict --engine
# deepspeed --json` (engine_step.host_model) and, on run 8b's probe files
# (validation/engines/h200x1/run8b), reproduces the engine_host section the
# device wrote then, every constant within 1e-12 relative; bad input is one
# line on stderr, exit 2, nothing written.
. "$(dirname "$0")/../cli_lib.sh"
P="$PLANNER"
R="$ROOT/validation/engines/h200x1/run8b"
S="$ROOT/scripts/engines/probe_to_profile.py"
PLAN="$ROOT/validation/engines/plans8/probe/ds-z2-llama.json"
expect_exit 0 python3 "$S" --planner "$P" --plan "$PLAN" --eager-swiglu "$R/eager-llama.jsonl" \
  --eager-gelu "$R/eager-gpt2.jsonl" --ds-z2 "$R/engines/probe-ds-z2-llama.result.json" \
  --ds-z3 "$R/engines/probe-ds-z3-llama.result.json" --fsdp-z3 "$R/engines/probe-fsdp-z3-llama.result.json" \
  --megatron "$R/engines/probe-mg-gas2-llama.result.json" -o "$TMP/profile.json"
if python3 - "$TMP/profile.json" "$R/engine-host-profile.json" <<'PY'
import json, sys
a, b = (json.load(open(f))["engine_host"] for f in sys.argv[1:3])
keys = {k for k in a if k != "source"}
assert keys == {k for k in b if k != "source"}, "different constants"
bad = [k for k in keys if abs(a[k] - b[k]) > 1e-12 * max(abs(b[k]), 1e-30)]
assert not bad, f"constants differ: {bad}"
PY
then passes=$((passes+1)); else echo "FAIL: run 8b's engine_host not reproduced"; fails=$((fails+1)); fi
# The planner's figures, not a copy: a planner that cannot run is refused by name.
expect_bad_input python3 "$S" --planner "$TMP/no-planner" --plan "$PLAN" -o "$TMP/x.json"
expect_grep "cannot run" "$TMP/err"
[ ! -e "$TMP/x.json" ] && passes=$((passes+1)) || { echo "FAIL: wrote $TMP/x.json"; fails=$((fails+1)); }
expect_bad_input python3 "$S" --planner "$P" --plan "$TMP/missing.json" -o "$TMP/x.json"
finish
