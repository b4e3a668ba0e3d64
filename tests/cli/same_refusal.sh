#!/usr/bin/env bash
# One place decides whether a (model, cluster, strategy) triple is legal
# (check_compat, costmodel/compat.hpp): every command that takes a triple
# refuses the same illegal one with exit 2 and the same line, whether the
# triple comes from --model/--gpus/--strategy or from a plan file.
. "$(dirname "$0")/../cli_lib.sh"
P="$PLANNER"

# same_refusal NAME GPUS LEGAL ILLEGAL PATTERN [plan-only]: a plan file of the
# LEGAL strategy with its strategy fields set to ILLEGAL (dp, tp and pp spelt
# out, so that nothing is derived differently), and the same triple on the
# command line (unless plan-only); every command's one line must be the first's.
same_refusal() {
  local name=$1 gpus=$2 legal=$3 illegal=$4 pattern=$5 plan_only=${6:-}
  expect_exit 0 $P memory --model gpt2 --gpus "$gpus" --strategy "$legal" -o "$TMP/$name.legal.json" || return
  python3 - "$TMP/$name.legal.json" "$illegal" "$TMP/$name.json" <<'PY' || { fails=$((fails+1)); return; }
import json, sys
p = json.load(open(sys.argv[1]))
p["strategy"].pop("text", None)  # the fields alone say the strategy (a contradicting text is refused)
for kv in sys.argv[2].split(","):
    k, v = kv.split("=")
    if k == "global_batch":
        p[k] = int(v)
    else:
        p["strategy"][k] = int(v) if v.isdigit() else v
json.dump(p, open(sys.argv[3], "w"))
PY
  local f="$TMP/$name.json" first="" n=0
  local -a cmds=("memory --plan $f" "predict --plan $f" "predict --plan $f --trace $TMP/t.json"
                 "memory --plan $f --engine deepspeed" "export $f --to deepspeed" "export $f --to megatron"
                 "export $f --to fsdp" "exec $f")
  [ -z "$plan_only" ] && cmds+=("memory --model gpt2 --gpus $gpus --strategy $illegal"
                                "predict --model gpt2 --gpus $gpus --strategy $illegal")
  for c in "${cmds[@]}"; do
    # shellcheck disable=SC2086
    expect_bad_input $P $c || continue
    n=$((n+1))
    if [ -z "$first" ]; then
      first=$(cat "$TMP/err")
      expect_grep "$pattern" "$TMP/err"
    elif [ "$(cat "$TMP/err")" != "$first" ]; then
      echo "FAIL: '$c' refused $name differently:"; echo "  $(cat "$TMP/err")"; echo "  first: $first"
      fails=$((fails+1))
    fi
  done
  echo "$name: $n commands, one line: $first"
}

same_refusal heads 8xH100 dp=2,tp=4 dp=1,tp=8,pp=1 "tp=8 must divide the attention heads"
same_refusal world 2xH100 dp=2 dp=3,tp=1,pp=1 "dp\*tp\*pp = 3\*1\*1 = 3 must equal the GPU count 2"
same_refusal layers 16xH100 dp=16 dp=1,tp=1,pp=16 "pp=16 must be at most the layers"
same_refusal bf16 2xV100-32GB dp=2,precision=fp16 dp=2,tp=1,pp=1,precision=bf16 "bfloat16"
same_refusal zero 4xH100 dp=2,pp=2,zero=1 dp=2,tp=1,pp=2,zero=2 "zero=2 with pp=2 is not supported"
same_refusal batch 2xH100 dp=2 global_batch=3 "global batch 3 must equal dp\*mbs\*gas" plan-only
finish
