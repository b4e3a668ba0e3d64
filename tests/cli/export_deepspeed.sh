#!/usr/bin/env bash
# `planner export --to deepspeed` checked by DeepSpeed's own config parser
# (deepspeed.runtime.config.DeepSpeedConfig, DeepSpeed 0.19.8 from PyPI): every
# exported config is accepted, and what DeepSpeed reads from it is the plan's
# strategy. DeepSpeed is installed once into a virtual environment beside the
# planner binary (reusing the system's torch); when python, torch or PyPI is
# missing the test skips (exit 77) and says why.
. "$(dirname "$0")/../cli_lib.sh"
P="$PLANNER"
skip() { echo "SKIP: $*"; exit 77; }

# Plans covering DP, ZeRO-1/2/3, optimizer and full offload, AutoTP, a DeepSpeed
# pipeline, full checkpointing, bf16, fp16 and fp32: "model|gpus|strategy|global batch".
cases=(
  "gpt2-xl|8xA100-80GB|zero=0,mbs=4|64"
  "llama-2-7b|8xH100|zero=1,ckpt=full,mbs=2|64"
  "llama-2-7b|8xH100|zero=2,offload=optimizer,mbs=1|64"
  "llama-2-7b|8xH100|zero=3,offload=all,mbs=1|64"
  "gpt2-large|8xA100-80GB|tp=2,zero=2,mbs=2|16"
  "gpt2-xl|8xA100-80GB|pp=2,zero=1,offload=optimizer,mbs=2|32"
  "gpt2-large|8xV100-32GB|zero=2,precision=fp16,mbs=2|32"
  "gpt2|2xRTX3090|zero=1,precision=fp32,mbs=8|16"
)
i=0
for c in "${cases[@]}"; do
  IFS='|' read -r model gpus strategy gb <<<"$c"
  expect_exit 0 $P predict --model "$model" --gpus "$gpus" --strategy "$strategy" --global-batch "$gb" -o "$TMP/plan$i.json" || continue
  expect_exit 0 $P export "$TMP/plan$i.json" --to deepspeed -o "$TMP/ds$i.json" || continue
  expect_grep "deepspeed --num_gpus .* scripts/engines/deepspeed_train.py --plan .* --deepspeed --deepspeed_config $TMP/ds$i.json" "$TMP/out"
  i=$((i+1))
done
[ "$i" = "${#cases[@]}" ] || { finish; exit 1; }

command -v python3 >/dev/null || skip "python3 not found: DeepSpeed's parser cannot run"
python3 -c 'import torch' 2>/dev/null || skip "torch is not installed (scripts/setup.sh without --no-torch installs it); DeepSpeed needs it"
VENV="$(dirname "$P")/deepspeed-venv"
if ! "$VENV/bin/python" -c 'import deepspeed' 2>/dev/null; then
  rm -rf "$VENV"
  python3 -m venv --system-site-packages "$VENV" >/dev/null 2>&1 || skip "python3 -m venv failed (Debian: apt-get install python3-venv)"
  timeout 240 "$VENV/bin/python" -m pip install -q deepspeed==0.19.8 >"$TMP/pip.log" 2>&1 ||
    { tail -3 "$TMP/pip.log"; skip "pip could not install deepspeed==0.19.8 (PyPI unreachable?)"; }
  "$VENV/bin/python" -c 'import deepspeed' 2>/dev/null || skip "deepspeed installed but does not import"
fi

if "$VENV/bin/python" - "$TMP" "$i" <<'PY' 2>"$TMP/py.err"; then passes=$((passes+1)); else tail -20 "$TMP/py.err"; fails=$((fails+1)); fi
import json, os, socket, sys
tmp, n = sys.argv[1], int(sys.argv[2])
sock = socket.socket(); sock.bind(("127.0.0.1", 0)); port = sock.getsockname()[1]; sock.close()
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
import deepspeed, deepspeed.ops
# DeepSpeed would compile its shared-memory CPU collective on the first
# init_distributed (a minute of g++); the parser does not need it.
deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
from deepspeed.runtime.config import DeepSpeedConfig
# DeepSpeedConfig takes the data-parallel size from an mpu, inside a process group.
deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)

class Mpu:
    def __init__(self, dp): self.dp = dp
    def get_data_parallel_world_size(self): return self.dp
    def get_data_parallel_rank(self): return 0

for k in range(n):
    plan = json.load(open(f"{tmp}/plan{k}.json"))
    want = plan["strategy"]
    path = f"{tmp}/ds{k}.json"
    c = DeepSpeedConfig(path, mpu=Mpu(want["dp"]))  # raises on anything DeepSpeed rejects
    raw = json.load(open(path))
    z = c.zero_config
    offload = "none"
    if z.offload_optimizer is not None and str(z.offload_optimizer.device).endswith("cpu"): offload = "optimizer"
    if z.offload_param is not None and str(z.offload_param.device).endswith("cpu"): offload = "all"
    precision = "bf16" if c.bfloat16_config.enabled else "fp16" if c.float16_config.enabled else "fp32"
    got = {
        "zero": c.zero_optimization_stage, "offload": offload, "mbs": c.train_micro_batch_size_per_gpu,
        "gas": c.gradient_accumulation_steps, "precision": precision,
        "ckpt": "full" if "activation_checkpointing" in raw else "none",
        "tp": max(1, c.tensor_parallel_config.autotp_size),
        "pp": c.pipeline["stages"] if "pipeline" in raw else 1,
    }
    got["dp"] = c.train_batch_size // (got["mbs"] * got["gas"])
    for key, value in got.items():
        assert value == want[key], f"{path}: {key} = {value}, the plan has {want[key]}"
    assert c.train_batch_size == plan["global_batch"], (path, c.train_batch_size)
    # DeepSpeed's own batch check: the same file with another dp is refused.
    try:
        DeepSpeedConfig(path, mpu=Mpu(want["dp"] * 2))
    except AssertionError:
        pass
    else:
        raise AssertionError(f"{path}: DeepSpeed accepted a wrong data-parallel size")
print(f"DeepSpeed {deepspeed.__version__} parsed {n} configs back into their plans' strategies")
PY
finish
