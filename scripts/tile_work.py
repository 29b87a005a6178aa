#!/usr/bin/env python3
"""The pairs flash.avx512's tiles compute, against the visible pairs.

Follows variants/flash.c's split of a query block's keys (flash_block for plain
causal, flash_block_var for a causal window L:0) at its defaults (blocks of 64
queries and 64 keys) and the AVX-512 tile (kernels/gemm.c: scores in strips of
MR = 6 keys by the 16-query vectors mha_band_cols keeps; P.V as rows x keys,
per row tile of 6 over the keys its rows see on the edges and the diagonal).
A model of the code, not a measurement: keep it in step with flash.c when the
split changes. Used in docs/attention-variants.md (small windows).

usage: scripts/tile_work.py [N [L ...]]   (default: 8192 and 128 256 512 1024 4096)
"""
import sys
MR,VW,BQ,BK=6,16,64,64
def cols(t0,t1,r0,r,ncols):
    first=t0+r0; end=t1+r0+r
    c0=0 if first<=0 else (ncols if first>=ncols else first//VW*VW)
    c1=0 if end<=0 else (ncols if end>=ncols else (end+VW-1)//VW*VW)
    return c0,max(c1,c0)
def qk(bkk,ncols,masked,t0,t1):
    if not masked: return bkk*ncols
    s=0
    for r0 in range(0,bkk,MR):
        r=min(MR,bkk-r0); c0,c1=cols(t0,t1,r0,r,ncols); s+=r*(c1-c0)
    return s
def window(N,L):
    vis=qkw=pvw=0
    for i0 in range(0,N,BQ):
        n=min(BQ,N-i0); ncols=(n+VW-1)//VW*VW
        kb=[max(0,i0+min(i,n-1)-L) for i in range(ncols)]; ke=[i0+min(i,n-1)+1 for i in range(ncols)]
        vis+=sum(ke[i]-kb[i] for i in range(n))
        lo,hi=kb[0],ke[n-1]; f0,f1=kb[n-1],ke[0]
        if f1<=f0: f0=f1=hi
        nfull=(f1-f0+BK-1)//BK; even=(f1-f0+nfull-1)//nfull if nfull else BK
        even=min(BK,(even+MR-1)//MR*MR)
        j0=lo
        while j0<hi:
            full= f0<=j0<f1
            stop=f0 if j0<f0 else (f1 if full else hi); most=even if full else BK
            bkk=min(stop-j0,most)
            qkw+=qk(bkk,ncols,not full,j0-i0,j0-i0+L)
            if full: pvw+=n*bkk
            else:
                for r0 in range(0,n,MR):
                    rows=min(MR,n-r0); k0=min(max(kb[r0]-j0,0),bkk); k1=min(max(ke[r0+rows-1]-j0,k0),bkk)
                    pvw+=rows*(k1-k0)
            j0+=bkk
    return vis,qkw,pvw
def causal(N):
    vis=qkw=pvw=0
    for i0 in range(0,N,BQ):
        n=min(BQ,N-i0); ncols=(n+VW-1)//VW*VW; kv_end=i0+n
        vis+=sum(i0+i+1 for i in range(n))
        full=i0+1; nfull=(full+BK-1)//BK; even=(full+nfull-1)//nfull if nfull else BK
        even=min(BK,(even+MR-1)//MR*MR); j0=0
        while j0<kv_end:
            diag=j0>=full; bkk=min(kv_end-j0 if diag else full-j0, BK if diag else even)
            qkw+=qk(bkk,ncols,diag,j0-i0,1<<30)
            if not diag: pvw+=n*bkk
            else:
                for r0 in range(0,n,MR):
                    rows=min(MR,n-r0); kc=min(max(i0+r0+rows-1+1-j0,0),bkk); pvw+=rows*kc
            j0+=bkk
    return vis,qkw,pvw
N=int(sys.argv[1]) if len(sys.argv)>1 else 8192
WINDOWS=[int(a) for a in sys.argv[2:]] or [128,256,512,1024,4096]
v,a,b=causal(N); print(f"causal N={N}: QK {a/v:.3f}x visible, PV {b/v:.3f}x")
for L in WINDOWS:
    v,a,b=window(N,L); print(f"window {L}:0 N={N}: QK {a/v:.3f}x visible, PV {b/v:.3f}x, both {(a+b)/(2*v):.3f}x")
