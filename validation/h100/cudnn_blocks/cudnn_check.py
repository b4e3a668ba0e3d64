import torch, math
torch.manual_seed(0)
dev='cuda'
def run(layout, h=32, d=64, n=128, gen='randn'):
    shape=(1,h,2*n,d)
    def mk(f):
        if gen=='randn': t=torch.randn(shape, device=dev)
        else: t=torch.arange(h*2*n*d, device=dev, dtype=torch.float32).mul(f).sin().reshape(shape)
        t=t.to(torch.bfloat16)
        if layout=='bshd': t=t.transpose(1,2).contiguous().transpose(1,2)
        return t
    q,k,v,do=mk(.37),mk(.71),mk(1.13),mk(.53)
    A=torch.ops.aten
    ref=A._scaled_dot_product_flash_attention(q,k,v,0.0,False)
    out_ref,lse_ref=ref[0],ref[1]
    k1,k2=k[:,:,:n],k[:,:,n:]; v1,v2=v[:,:,:n],v[:,:,n:]
    if layout=='bhsd': k1,k2,v1,v2=[t.contiguous() for t in (k1,k2,v1,v2)]
    r1=A._scaled_dot_product_cudnn_attention(q,k1,v1,None,True,0.0,False,False)
    r2=A._scaled_dot_product_cudnn_attention(q,k2,v2,None,True,0.0,False,False)
    print(layout,gen,'out',tuple(r1[0].shape),r1[0].stride(),'lse',tuple(r1[1].shape),r1[1].stride(),r1[1].dtype)
    l1=r1[1].reshape(1,h,2*n).float(); l2=r2[1].reshape(1,h,2*n).float()
    # single-block check vs flash on same block
    f1=A._scaled_dot_product_flash_attention(q,k1.contiguous(),v1.contiguous(),0.0,False)
    print('  block1 out maxdiff',(r1[0].float()-f1[0].float()).abs().max().item(),'max|o|',f1[0].float().abs().max().item(),
          'lse maxdiff',(l1-f1[1].float()).abs().max().item(), 'lse/ln2 diff',(l1*math.log(2)-f1[1]).abs().max().item())
    lse=torch.logaddexp(l1,l2)
    out=r1[0].float()*torch.exp(l1-lse).unsqueeze(-1)+r2[0].float()*torch.exp(l2-lse).unsqueeze(-1)
    print('  merged out maxdiff',(out-out_ref.float()).abs().max().item(),'max|out_ref|',out_ref.float().abs().max().item(),'lse diff',(lse-lse_ref).abs().max().item())
for layout in ('bhsd','bshd'):
    for gen in ('randn','sin'):
        try: run(layout,gen=gen)
        except Exception as e: print(layout,gen,'ERROR',str(e).splitlines()[0])
print(torch.__version__, torch.backends.cudnn.version())
