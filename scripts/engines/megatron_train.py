#!/usr/bin/env python3
"""Train a plan with megatron-core 0.19 from the argument list `planner export --to megatron` writes:

  CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nproc-per-node 4 scripts/engines/megatron_train.py $(cat megatron_args.txt)

Megatron-LM's pretrain_gpt.py is not part of the megatron-core wheel; this is
the same path with Megatron's own pieces, all from the wheel: its argument
parser and validation (parse_and_validate_args), initialize_megatron (process
groups: tp, pp, virtual stages, cp, dp; seeds), setup_model_and_optimizer
(Float16Module, DistributedDataParallel with the distributed optimizer when
asked, get_megatron_optimizer), the training step (train_step over
get_forward_backward_func: 1F1B or interleaved) and the hooks Megatron's
train() installs (grad scaling, no_sync / grad_sync / param_sync, finalize_model_grads).
The model is GPTModel with the Megatron-core-only layer spec (Transformer
Engine is not installed: local attention and linear layers). Synthetic tokens
(--mock-data is accepted; no dataset is built).

Timing: PLANNER_ENGINE_STEPS optimizer steps (default 10; never more than
--train-iters), the first PLANNER_ENGINE_WARMUP (default 3) untimed; rank 0
prints `ENGINE_RESULT {json}` and writes it to $PLANNER_ENGINE_RESULT when set.
"""
import os
import sys
from functools import partial

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_model  # noqa: E402


def model_provider(pre_process=True, post_process=True, vp_stage=None, config=None, pg_collection=None):
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.training import get_args
    from megatron.training.argument_utils import core_transformer_config_from_args
    args = get_args()
    config = config or core_transformer_config_from_args(args)
    spec = get_gpt_layer_local_spec(num_experts=args.num_experts, moe_grouped_gemm=args.moe_grouped_gemm,
                                    qk_layernorm=args.qk_layernorm, normalization=args.normalization)
    kw = {"pg_collection": pg_collection} if pg_collection is not None else {}
    return GPTModel(config=config, transformer_layer_spec=spec, vocab_size=args.padded_vocab_size,
                    max_sequence_length=args.max_position_embeddings, pre_process=pre_process,
                    post_process=post_process, fp16_lm_cross_entropy=args.fp16_lm_cross_entropy,
                    parallel_output=True, share_embeddings_and_output_weights=not args.untie_embeddings_and_output_weights,
                    position_embedding_type=args.position_embedding_type, rotary_percent=args.rotary_percent,
                    rotary_base=args.rotary_base, vp_stage=vp_stage, **kw)


class Tokens:
    """Endless synthetic micro-batches: tokens, labels, loss mask, position ids (no attention mask: causal)."""

    def __init__(self, vocab, mbs, seq, seed):
        self.vocab, self.mbs, self.seq = vocab, mbs, seq
        self.gen = torch.Generator().manual_seed(seed)

    def __iter__(self):
        return self

    def __next__(self):
        t = torch.randint(0, self.vocab, (self.mbs, self.seq + 1), generator=self.gen).cuda(non_blocking=True)
        pos = torch.arange(self.seq, device="cuda").unsqueeze(0).expand(self.mbs, -1)
        return {"tokens": t[:, :-1].contiguous(), "labels": t[:, 1:].contiguous(),
                "loss_mask": torch.ones(self.mbs, self.seq, device="cuda"), "position_ids": pos}


def loss_func(loss_mask, output_tensor):
    losses = output_tensor.float().view(-1)
    mask = loss_mask.view(-1).float()
    loss = torch.sum(losses * mask) / mask.sum()
    return loss, {"lm loss": loss.detach()}


def forward_step(data_iterator, model, return_schedule_plan=False):
    b = next(data_iterator) if data_iterator is not None else None
    out = model(b["tokens"], b["position_ids"], None, labels=b["labels"])
    return out, partial(loss_func, b["loss_mask"])


def without_fused_kernels(args):
    """Megatron's defaults assume Transformer Engine or apex's CUDA extensions: gradient-accumulation fusion
    (fused_weight_gradient_mlp_cuda), the fused masked softmax (scaled_*_softmax_cuda), the persistent layer
    norm and the fused rotary embedding (TE); with neither installed each raises at the model's build or first
    step. Turned off here when missing - what a user does with --no-gradient-accumulation-fusion
    --no-masked-softmax-fusion --no-persist-layer-norm --no-rope-fusion - and named on stdout."""
    import importlib.util
    have = {m: importlib.util.find_spec(m) is not None
            for m in ("transformer_engine", "fused_weight_gradient_mlp_cuda", "scaled_masked_softmax_cuda")}
    off = []
    if args.gradient_accumulation_fusion and not (have["fused_weight_gradient_mlp_cuda"] or have["transformer_engine"]):
        args.gradient_accumulation_fusion = False
        off.append("--no-gradient-accumulation-fusion")
    if args.masked_softmax_fusion and not have["scaled_masked_softmax_cuda"]:
        args.masked_softmax_fusion = False
        off.append("--no-masked-softmax-fusion")
    if not args.no_persist_layer_norm and not have["transformer_engine"]:
        args.no_persist_layer_norm = True
        off.append("--no-persist-layer-norm")
    if getattr(args, "apply_rope_fusion", False) and not have["transformer_engine"]:
        args.apply_rope_fusion = False
        off.append("--no-rope-fusion")
    if off and int(os.environ.get("RANK", "0")) == 0:
        print("note: neither Transformer Engine nor apex's extensions are installed: running as with " + " ".join(off),
              flush=True)
    return off


def skip_dataset_helper_build():
    """initialize_megatron runs `make` in megatron/core/datasets on rank 0 to build the dataset index helpers
    (_compile_dependencies); the wheel ships them prebuilt (helpers_cpp*.so) but no Makefile, so that `make`
    fails and Megatron exits. No dataset is built here (synthetic tokens), so the step is skipped; the barrier
    after it stays."""
    import megatron.training.initialize as mi

    def barrier_only():
        torch.distributed.barrier()

    mi._compile_dependencies = barrier_only


def last_stage_loss(loss, mpu):
    """The loss as the last pipeline stage reduced it, on every rank. train_step returns the reduced loss only on
    the last stage; rank 0 reports, and under pp > 1 rank 0 is the first stage, whose loss stayed the NaN it
    started as (run1's "last_rank_loss": NaN for pp2 x vpp2 was this, not a diverged model). The last stage's
    ranks contribute (loss, 1), the others (0, 0); the sum over all ranks divided by the count is their mean."""
    last = mpu.is_pipeline_last_stage(ignore_virtual=True)
    t = torch.tensor([loss if last else 0.0, 1.0 if last else 0.0], dtype=torch.float64, device="cuda")
    torch.distributed.all_reduce(t)
    return float(t[0] / t[1]) if t[1] > 0 else float("nan")


def main():
    from megatron.core.enums import ModelType
    from megatron.core.distributed import finalize_model_grads
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.utils import get_model_config
    from megatron.training import get_args, get_timers
    from megatron.training.arguments import parse_and_validate_args
    from megatron.training.initialize import initialize_megatron
    from megatron.training.training import setup_model_and_optimizer, train_step

    parse_and_validate_args()  # the exported list, through Megatron's own parser and validate_args
    args = get_args()
    without_fused_kernels(args)
    skip_dataset_helper_build()
    initialize_megatron()
    if args.use_megatron_fsdp:
        print("megatron_train: Megatron-FSDP (zero 2/3 exports) is not wired here", file=sys.stderr)
        return 2
    model, optimizer, scheduler = setup_model_and_optimizer(ModelType.encoder_or_decoder, model_provider)
    config = get_model_config(model[0])
    config.grad_scale_func = optimizer.scale_loss
    config.timers = get_timers()
    from megatron.core.distributed import DistributedDataParallel as DDP
    if isinstance(model[0], DDP) and args.overlap_grad_reduce:
        config.no_sync_func = [m.no_sync for m in model]
        config.no_sync_func = config.no_sync_func[0] if len(model) == 1 else config.no_sync_func
        if args.align_grad_reduce:
            config.grad_sync_func = [m.start_grad_sync for m in model]
            config.grad_sync_func = config.grad_sync_func[0] if len(model) == 1 else config.grad_sync_func
    if args.overlap_param_gather and args.align_param_gather:
        config.param_sync_func = [m.start_param_sync for m in model]
        config.param_sync_func = config.param_sync_func[0] if len(model) == 1 else config.param_sync_func
    if config.finalize_model_grads_func is None:
        config.finalize_model_grads_func = finalize_model_grads
    from megatron.core import parallel_state as mpu
    seed = 1000 + mpu.get_data_parallel_rank()
    from megatron.core.rerun_state_machine import RerunDataIterator
    # Wrapped as Megatron's training loop wraps its loaders (its rerun state machine, on by default, asserts it).
    its = [RerunDataIterator(Tokens(args.vocab_size, args.micro_batch_size, args.seq_length, seed)) for _ in model]
    data = its if len(model) > 1 else its[0]
    fb = get_forward_backward_func()
    steps, warmup = torch_model.steps_from_env()
    steps = min(steps, args.train_iters)
    for m in model:
        m.train()
    timer = torch_model.StepTimer(True)
    loss = float("nan")
    for it in range(steps):
        args.curr_iteration = it  # as Megatron's train() sets it before each step
        timer.start()
        out = train_step(forward_step, data, model, optimizer, scheduler, config, fb, iteration=it)
        dt = timer.stop()
        try:  # the reduced loss exists on the last pipeline stage only; its form differs between releases
            v = out[0]["lm loss"]
            loss = float(v[0] / v[1]) if isinstance(v, (tuple, list)) or getattr(v, "numel", lambda: 1)() == 2 else float(v)
        except (KeyError, TypeError, IndexError):
            pass
        if torch.distributed.get_rank() == 0:
            print(f"step {it + 1} time {dt:.4f} s", flush=True)
    loss = last_stage_loss(loss, mpu)
    dp = mpu.get_data_parallel_world_size()
    gbs = args.global_batch_size
    torch_model.report("megatron", timer, warmup, gbs * args.seq_length,
                       {"tp": args.tensor_model_parallel_size, "pp": args.pipeline_model_parallel_size,
                        "vpp": args.virtual_pipeline_model_parallel_size, "dp": dp, "cp": args.context_parallel_size,
                        "sequence_parallel": args.sequence_parallel,
                        "distributed_optimizer": args.use_distributed_optimizer, "mbs": args.micro_batch_size,
                        "global_batch": gbs, "seq": args.seq_length, "last_rank_loss": loss})
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
