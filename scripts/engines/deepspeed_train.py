#!/usr/bin/env python3
"""Train a planner plan's model with DeepSpeed, as `planner export --to deepspeed` writes it:

  deepspeed --num_gpus 4 scripts/engines/deepspeed_train.py --plan plan.json --deepspeed --deepspeed_config ds_config.json

The model (torch_model.Decoder, the plan's "model") is built here; everything
about how it trains - ZeRO stage, offload, micro-batch, accumulation,
precision, clipping, the optimizer - comes from the DeepSpeed config alone,
through deepspeed.initialize. Activation checkpointing: when the config has an
"activation_checkpointing" section, each block runs under
deepspeed.checkpointing.checkpoint (configured from that section). Synthetic
tokens (step time and memory do not depend on them).

Timing: PLANNER_ENGINE_STEPS optimizer steps (default 10), the first
PLANNER_ENGINE_WARMUP (default 3) untimed; rank 0 prints `ENGINE_RESULT {json}`
(torch_model.report) and writes it to $PLANNER_ENGINE_RESULT when set.
Pipeline ("pipeline" in the config) and AutoTP ("tensor_parallel") plans are
refused here (exit 2): they need deepspeed.pipe.PipelineModule / a Hugging
Face model, which this script does not build.
On a machine without CUDA it runs on CPU over gloo (a check of the wiring only).
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_model  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", required=True, help="the planner plan file (its model is built)")
    ap.add_argument("--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))
    import deepspeed
    ap = deepspeed.add_config_arguments(ap)  # --deepspeed, --deepspeed_config
    a = ap.parse_args()
    try:
        plan = json.load(open(a.plan))
        cfg = json.load(open(a.deepspeed_config))
    except (OSError, json.JSONDecodeError) as e:
        print(f"deepspeed_train: {e}", file=sys.stderr)
        return 2
    for k in ("pipeline", "tensor_parallel"):
        if k in cfg:
            print(f"deepspeed_train: the config's \"{k}\" section needs a model this script does not build "
                  "(PipelineModule / a Hugging Face model for AutoTP)", file=sys.stderr)
            return 2
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(a.local_rank)
        deepspeed.init_distributed(dist_backend="nccl")
    else:
        import deepspeed.ops
        # DeepSpeed would compile its shared-memory CPU collective first (minutes of g++); gloo does without.
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
        deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
    if not cuda and "optimizer" in cfg:
        # CPU wiring check only: torch's AdamW instead of DeepSpeed's FusedAdam, which it would JIT-build first.
        cfg["optimizer"].setdefault("params", {})["torch_adam"] = True
    seq = plan["seq"]
    spec = plan["model"]
    zero = cfg.get("zero_optimization", {})
    dtype = torch.bfloat16 if cfg.get("bf16", {}).get("enabled") else (
        torch.float16 if cfg.get("fp16", {}).get("enabled") else torch.float32)
    torch.manual_seed(1234)
    if zero.get("stage", 0) == 3:
        # Parameters partitioned as they are made, as ZeRO-3 models are built (never whole on one GPU).
        with deepspeed.zero.Init(config_dict_or_path=cfg, dtype=dtype):
            model = torch_model.Decoder(spec, seq)
    else:
        # Made on the GPU (deepspeed.initialize moves the module there anyway): initialising 1-3B parameters on
        # the CPU with torchrun's one thread per process took seconds of each launch.
        with torch.device(f"cuda:{a.local_rank}" if cuda else "cpu"):
            model = torch_model.Decoder(spec, seq)
    if "activation_checkpointing" in cfg:
        deepspeed.checkpointing.configure(None, deepspeed_config=a.deepspeed_config)
        model.checkpoint = lambda blk, x: deepspeed.checkpointing.checkpoint(blk, x)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    mbs = engine.train_micro_batch_size_per_gpu()
    gas = engine.gradient_accumulation_steps()
    steps, warmup = torch_model.steps_from_env()
    gen = torch.Generator().manual_seed(1000 + engine.global_rank)
    timer = torch_model.StepTimer(cuda)
    device = engine.device
    loss = None
    for _ in range(steps):
        timer.start()
        for _ in range(gas):
            x, y = torch_model.batch(spec["vocab"], mbs, seq, device, gen)
            loss = torch_model.lm_loss(engine(x), y)
            engine.backward(loss)
            timer.mark()
            engine.step()  # DeepSpeed steps the optimizer at the accumulation boundary only
        dt = timer.stop()
        if engine.global_rank == 0:
            print(f"step {len(timer.times)} loss {loss.item():.4f} time {dt:.4f} s", flush=True)
    tokens = mbs * gas * seq * engine.dp_world_size if hasattr(engine, "dp_world_size") else mbs * gas * seq
    torch_model.report("deepspeed", timer, warmup, tokens,
                       {"zero_stage": zero.get("stage", 0), "offload_optimizer": "offload_optimizer" in zero,
                        "offload_param": "offload_param" in zero, "mbs": mbs, "gas": gas, "seq": seq,
                        "deepspeed": deepspeed.__version__, "final_loss": float(loss.item())})
    return 0


if __name__ == "__main__":
    sys.exit(main())
