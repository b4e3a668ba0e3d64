#!/usr/bin/env python3
"""Every one-GPU H200 run with a kernel table under validation/ (exec or validate result JSONs): the
prediction's GEMM+attention share of the forward+backward kernels (duty_pred) and of the measured busy time
(duty_meas), and predicted/measured seconds per kernel class and step. Run from the repository root:
  python3 validation/h200x2/clock43/duty.py"""
import glob, json
rows=[]
files=glob.glob('validation/**/*.json',recursive=True)
for f in files:
    if 'h200' not in f: continue
    try: d=json.load(open(f))
    except Exception: continue
    if not isinstance(d,dict) or 'measurement' not in d or 'prediction' not in d: continue
    m=d['measurement']; p=d['prediction']
    k=m.get('kernels') if isinstance(m,dict) else None
    if not k or not k.get('by_class'): continue
    if (m.get('world') or 1)!=1: continue
    b=p.get('breakdown',{}).get('compute_by_class')
    if not b: continue
    bc=k['by_class']
    pg,pa,pm=b['gemm_seconds'],b['attention_seconds'],b['memory_bound_seconds']
    mg,ma,mm=bc['gemm_seconds'],bc['attention_seconds'],bc['memory_bound_seconds']
    if mg<=0: continue
    duty=(pg+pa)/(pg+pa+pm)
    mduty=(mg+ma)/k['busy_seconds']
    plan=d.get('plan',{})
    s=plan.get('strategy',{}) if isinstance(plan,dict) else {}
    prec=s.get('precision') if isinstance(s,dict) else None
    rows.append((duty,mduty,pg/mg,(pa/ma if ma else 0),pm/mm if mm else 0,p['step_seconds']/(m['step_seconds']['median'] if isinstance(m['step_seconds'],dict) else m['step_seconds']),f,prec))
rows.sort()
for r in rows: print(f"duty_pred={r[0]:.3f} duty_meas={r[1]:.3f} gemm p/m={r[2]:.3f} attn={r[3]:.3f} mem={r[4]:.3f} step={r[5]:.3f} {r[7]} {r[6][11:80]}")
