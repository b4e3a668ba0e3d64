#!/usr/bin/env python3
"""The max(host, GPU) prototype of validation/engines/probe6/README.md (analysis, not product code).

  python3 validation/engines/probe6/prototype.py      # from the repository root, with build/planner built

For each launch of runs 1-5 (validation/engines), the step as
gas x max(host per micro-batch, simulated GPU per micro-batch) + max(host tail, optimizer),
with the host's figures per count from probe6's tiny-model launches (C below, read off run/),
beside `predict --engine`'s step as it stands. Prints each launch and the MAPE per engine.
"""
import json, subprocess, glob, os, statistics
ROOT=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))); X=ROOT+'/build/planner'
RUNS=[("run1","validation/engines/plans","validation/engines/h100x4/run1/engines","4xH100","validation/h100x4/calib20/profile-4gpu.json"),
("run2","validation/engines/plans2","validation/engines/h200x4/run2/engines","4xH200",None),
("run3","validation/engines/plans3","validation/engines/x2/run3/engines","2xH200",None),
("run4","validation/engines/plans4","validation/engines/x2/run4/engines","2xH100",None),
("run5","validation/engines/plans5","validation/engines/x2/run5/engines","2xH200",None)]
C=dict(eager_llama=3.42e-3, eager_gpt2=1.65e-3, eager_gpt2_outer=1.4e-3,
 ds_z12_tensor={1:0.159e-3,2:0.153e-3}, ds_z3_module=0.338e-3, ds_z3_tensor=0.288e-3,
 ds_tail_tensor={1:0.076e-3,2:0.076e-3,3:0.24e-3},
 fsdp_tensor={2:0.43e-3,3:0.375e-3}, fsdp_tail_tensor={2:0.89e-3,3:0.67e-3},
 dtensor_linear={2:1.69e-3,3:2.0e-3}, dtensor_tail_tensor={2:1.47e-3,3:1.37e-3},
 mg_layer=6.62e-3, mg_tail=0.020)
def counts(m):
    ln = m['norm']!='rmsnorm'; norm=2 if ln else 1
    npl = 2
    per = 4 + (3 if m['qkv_bias'] else 0) + (1 if m['out_bias'] else 0) + (3 if m['mlp']=='swiglu' else 2)*(2 if m['mlp_bias'] else 1) + npl*norm
    outer = 1 + (1 if m['pos']=='learned' else 0) + (norm if m['final_norm'] else 0) + (0 if m['tied_embeddings'] else 1) + (1 if m['lm_head_bias'] else 0)
    tensors = m['layers']*per+outer
    mods = m['layers']*(4+(3 if m['mlp']=='swiglu' else 2)+npl) + 1 + (1 if m['pos']=='learned' else 0) + (1 if m['final_norm'] else 0) + 1
    return tensors, mods
def model(plan, engine, j):
    m=plan['model']; s=plan['strategy']; gas=s['gas']; L=m['layers']
    es=j['engine_step']
    gpu = es['simulated_seconds'] + sum(t['seconds'] for t in es['terms'] if t['name'] in ('eager kernels','unfused mask + softmax','main_grad accumulation'))
    gtail = j['breakdown']['optimizer_seconds']
    gmb = (gpu-gtail)/gas
    T,M = counts(m)
    llama = m['mlp']=='swiglu'
    eager = (C['eager_llama']*L) if llama else (C['eager_gpt2']*L + C['eager_gpt2_outer'])
    z=s['zero']
    if engine=='deepspeed':
        if z==3: hmb = eager + 2*(C['ds_z3_module']*M + C['ds_z3_tensor']*T)
        else: hmb = eager + C['ds_z12_tensor'][max(1,z)]*T
        htail = C['ds_tail_tensor'][max(1,z)]*T
    elif engine=='fsdp':
        hmb = eager + C['fsdp_tensor'][z]*T
        htail = C['fsdp_tail_tensor'][z]*T
        if s['tp']>1:
            lin = L*(4+(3 if llama else 2))+2
            hmb += C['dtensor_linear'][z]*lin
            htail = C['dtensor_tail_tensor'][z]*T
    else:
        hmb = C['mg_layer']*L/s['pp']
        htail = C['mg_tail']
        # pipeline: per-mb host on a stage runs over its layers; bubble on gpu side
    step = gas*max(gmb,hmb) + max(gtail,htail)
    return step, gpu, gas*hmb+htail
rows=[]
for run,plans,res,gpus,prof in RUNS:
    for f in sorted(glob.glob(os.path.join(ROOT,res,'*.result.json'))):
        n=os.path.basename(f)[:-len('.result.json')]
        pf=os.path.join(ROOT,plans,n+'.json')
        if not os.path.exists(pf): continue
        plan=json.load(open(pf)); r=json.load(open(f))
        engine=r['engine']
        if prof: cmd=[X,'predict','--plan',pf,'--profile',os.path.join(ROOT,prof)]
        else: cmd=[X,'predict','--model',plan['model']['name'],'--gpus',gpus,'--strategy',plan['strategy']['text'],'--seq',str(plan['seq']),'--global-batch',str(plan['global_batch'])]
        j=json.loads(subprocess.run(cmd+['--engine',engine,'--json'],capture_output=True,text=True).stdout)
        step,gpu,host=model(plan,engine,j)
        meas=r['median_step_s']
        old=j['engine_step']['step_seconds']
        rows.append((run,n,engine,meas,old,step,gpu,host))
        print(f"{run:5} {n:26} {engine:9} meas {meas:.3f} old {old:.3f} ({(old-meas)/meas*100:+5.1f}%) new {step:.3f} ({(step-meas)/meas*100:+5.1f}%)  gpu {gpu:.3f} host {host:.3f}")
for e in ('deepspeed','fsdp','megatron',None):
    rr=[r for r in rows if e is None or r[2]==e]
    print(e, len(rr), 'old MAPE %.1f'%(100*statistics.mean(abs(r[4]-r[3])/r[3] for r in rr)), 'new MAPE %.1f'%(100*statistics.mean(abs(r[5]-r[3])/r[3] for r in rr)))
