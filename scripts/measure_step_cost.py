#!/usr/bin/env python3
"""Measure engine step cost against verified tokens for several model shapes (the tuner's step-time priors).

Same method as docs/references.md §5's `h200-step-cost-llama8b.json`: random bf16 weights, a KV cache of CTX tokens per
sequence, one forward over B sequences x q = N + 1 query tokens, captured in a CUDA graph and timed by CUDA
events (median of REPS). Attention packs each KV head's query group into the query length, as decode
kernels do; rotary embeddings and norms' fusion are left out (elementwise, small next to the matmuls).
Deep stacks are measured on a slice of `layers_measured` layers and scaled to the full depth (layers are
identical; the LM head is timed on its own), so the shapes fit one GPU with their KV caches.

Keys of each output file (as in the shared data): `qs`, `target_ms[B][i]` (full target over B x qs[i]
tokens), `ar_head_step_ms[B]` (one target layer + LM head over B tokens: an MTP/EAGLE-like head step),
`block_drafter_ms[B][i]` (five dense layers + LM head over B x qs[i] tokens: a DFlash-like block pass).

    python3 scripts/measure_step_cost.py --shape dense32b --out OUT.json            # one GPU
    torchrun --nproc-per-node 2 scripts/measure_step_cost.py --shape dense70b-tp2 --out OUT.json
    python3 scripts/measure_step_cost.py --shape cpu-dense1b --out OUT.json         # CPU, no GPU used
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

QS = (1, 2, 3, 4, 5, 6, 8, 12, 16)
GPU_BS = (1, 4, 16, 32, 64, 128, 256)
CPU_BS = (1, 2, 4, 8, 16)
REPS = 20
GROUPED_MM = False  # set in main(): torch._grouped_mm where this build has it (Hopper, bf16)


@dataclass(frozen=True)
class Shape:
    name: str
    hidden: int
    layers: int
    layers_measured: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int  # dense FFN, or one expert's FFN for MoE
    vocab: int
    experts: int = 0  # 0: dense
    top_k: int = 0
    tp: int = 1
    ctx: int = 1024
    device: str = "cuda"
    dtype: torch.dtype = torch.bfloat16
    note: str = ""


SHAPES = {
    # Qwen2.5-32B-like dense target: 4x the 8B's weights, the same GPU.
    "dense32b": Shape("dense32b", 5120, 64, 16, 40, 8, 128, 27648, 152064,
                      note="Qwen2.5-32B-shaped dense, 16 of 64 layers measured and scaled"),
    # Many small experts (Qwen3-Next-80B-A3B-like routing: 512 experts, top-10, expert FFN 512).
    "moe512": Shape("moe512", 2048, 48, 12, 16, 2, 256, 512, 151936, experts=512, top_k=10,
                    note="512 experts top-10, expert FFN 512, uniform routing; 12 of 48 layers measured and scaled"),
    # Llama-70B-like dense target split over two GPUs: two all-reduces per layer on top of the matmuls.
    "dense70b-tp2": Shape("dense70b-tp2", 8192, 80, 20, 64, 8, 128, 28672, 128256, tp=2,
                          note="Llama-70B-shaped dense, tensor parallel 2 (NCCL all-reduce); 20 of 80 layers measured and scaled"),
    # A 1B dense model on CPU cores: compute bound from the first token (the shape of vLLM's CPU build).
    "cpu-dense1b": Shape("cpu-dense1b", 2048, 16, 16, 32, 8, 64, 8192, 32000, ctx=512, device="cpu",
                         dtype=torch.float32, note="Llama-3.2-1B-shaped dense on CPU cores, fp32"),
}


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


class Layer:
    """One decoder layer's weights (this rank's shard) and KV cache; `forward` runs B x q new tokens."""

    def __init__(self, s: Shape, dense_ffn: int | None = None) -> None:
        dev, dt = s.device, s.dtype
        self.s = s
        self.hq, self.hkv = s.heads // s.tp, max(s.kv_heads // s.tp, 1)
        d = s.head_dim
        r = lambda *shape: torch.randn(*shape, device=dev, dtype=dt) * 0.02  # noqa: E731
        self.wqkv = r(s.hidden, (self.hq + 2 * self.hkv) * d)
        self.wo = r(self.hq * d, s.hidden)
        self.moe = s.experts > 0 and dense_ffn is None
        ffn = (dense_ffn or s.ffn) // (1 if self.moe else s.tp)
        if self.moe:
            # Stored (expert, out, in) and used transposed, as grouped GEMM kernels expect.
            self.router = r(s.hidden, s.experts)
            self.w1 = r(s.experts, 2 * s.ffn, s.hidden)
            self.w2 = r(s.experts, s.hidden, s.ffn)
        else:
            self.w1 = r(s.hidden, 2 * ffn)
            self.w2 = r(ffn, s.hidden)
        self.cache = torch.zeros(0)

    def alloc_cache(self, b: int) -> None:
        s = self.s
        self.cache = torch.zeros(0)
        self.cache = torch.zeros(2, b, self.hkv, s.ctx + max(QS), s.head_dim, device=s.device, dtype=s.dtype)

    def set_routing(self, tokens: int, gen: torch.Generator) -> None:
        """Uniform routing of `tokens` tokens to top_k of the experts, fixed for the captured graph."""
        s = self.s
        choice = torch.rand(tokens, s.experts, generator=gen).topk(s.top_k, dim=1).indices.reshape(-1)
        order = torch.argsort(choice, stable=True)
        counts = torch.bincount(choice, minlength=s.experts)
        self.perm_tokens = (order // s.top_k).to(s.device)
        self.offs = torch.cumsum(counts, 0).to(torch.int32).to(s.device)
        ends = self.offs.tolist()
        self.spans = [(e, a, z) for e, (a, z) in enumerate(zip([0] + ends[:-1], ends)) if z > a]

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        if not self.moe:
            g, u = (x @ self.w1).chunk(2, dim=-1)
            return (F.silu(g) * u) @ self.w2
        _ = torch.topk(x @ self.router, self.s.top_k, dim=-1)  # the router's cost; routing is preset
        xs = x[self.perm_tokens]
        if GROUPED_MM:
            h = torch._grouped_mm(xs, self.w1.transpose(-2, -1), offs=self.offs)
            g, u = h.chunk(2, dim=-1)
            y = torch._grouped_mm((F.silu(g) * u).contiguous(), self.w2.transpose(-2, -1), offs=self.offs)
        else:
            # One matmul pair per touched expert: only the experts the tokens woke are read.
            y = torch.empty_like(xs)
            for e, a, z in self.spans:
                g, u = (xs[a:z] @ self.w1[e].T).chunk(2, dim=-1)
                y[a:z] = (F.silu(g) * u) @ self.w2[e].T
        return torch.zeros_like(x).index_add_(0, self.perm_tokens, y)

    def forward(self, x: torch.Tensor, b: int, q: int) -> torch.Tensor:
        s, d = self.s, self.s.head_dim
        qkv = x @ self.wqkv
        qh, k, v = qkv.split([self.hq * d, self.hkv * d, self.hkv * d], dim=-1)
        k = k.view(b, q, self.hkv, d).transpose(1, 2)
        v = v.view(b, q, self.hkv, d).transpose(1, 2)
        self.cache[0, :, :, s.ctx:s.ctx + q] = k
        self.cache[1, :, :, s.ctx:s.ctx + q] = v
        group = self.hq // self.hkv
        qh = qh.view(b, q, self.hkv, group, d).permute(0, 2, 3, 1, 4).reshape(b, self.hkv, group * q, d)
        o = F.scaled_dot_product_attention(qh, self.cache[0, :, :, :s.ctx + q], self.cache[1, :, :, :s.ctx + q])
        o = o.view(b, self.hkv, group, q, d).permute(0, 3, 1, 2, 4).reshape(b * q, self.hq * d)
        x = x + all_reduce(o @ self.wo, s)
        return x + all_reduce(self._mlp(x), s)


def all_reduce(t: torch.Tensor, s: Shape) -> torch.Tensor:
    if s.tp > 1:
        torch.distributed.all_reduce(t)
    return t


def timed(fn, s: Shape) -> float:
    """Median ms of fn(): a CUDA graph replayed and timed by events on a GPU, wall time on CPU."""
    if s.device == "cpu":
        fn()
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1000)
        return statistics.median(times)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    times = []
    for _ in range(REPS + 3):
        a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        e.record()
        e.synchronize()
        times.append(a.elapsed_time(e))
    del g
    return statistics.median(times[3:])


def measure(s: Shape) -> dict:
    t_start = time.time()
    bs = CPU_BS if s.device == "cpu" else GPU_BS
    gen = torch.Generator().manual_seed(0)
    target: dict[str, list[float]] = {}
    head_step: dict[str, float] = {}
    block: dict[str, list[float]] = {}
    layers = [Layer(s) for _ in range(s.layers_measured)]
    head_w = torch.randn(s.hidden, s.vocab // s.tp, device=s.device, dtype=s.dtype) * 0.02
    drafter = [Layer(s, dense_ffn=3 * s.hidden) for _ in range(5)]
    for b in bs:
        for layer in layers + drafter:
            layer.alloc_cache(b)
        row, brow = [], []
        for q in QS:
            x = torch.randn(b * q, s.hidden, device=s.device, dtype=s.dtype)
            for layer in layers:
                if layer.moe:
                    layer.set_routing(b * q, gen)

            def stack(x=x, q=q):
                y = x
                for layer in layers:
                    y = layer.forward(y, b, q)
                return y

            t_layers = timed(stack, s)
            t_head = timed(lambda x=x: x @ head_w, s)
            row.append(round(t_layers * s.layers / s.layers_measured + t_head, 4))
            brow.append(round(timed(lambda x=x, q=q: _drafter(drafter, x, b, q) @ head_w, s), 4))
            if q == 1:
                one = layers[0]
                head_step[str(b)] = round(timed(lambda x=x: one.forward(x, b, 1) @ head_w, s), 4)
        target[str(b)], block[str(b)] = row, brow
        if rank() == 0:
            print(f"{s.name} B={b}: t(q=1)={row[0]:.3f} ms, t(q=16)={row[-1]:.3f} ms", flush=True)
        if s.device == "cuda":
            torch.cuda.empty_cache()
    where = torch.cuda.get_device_name() if s.device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    return {"model": s.note, "shape": s.name, "ctx": s.ctx, "gpu": where, "tp": s.tp,
            "moe_kernel": ("grouped_mm" if GROUPED_MM else "per-expert matmuls") if s.experts else None,
            "qs": list(QS),
            "target_ms": target, "ar_head_step_ms": head_step, "block_drafter_ms": block,
            "seconds": round(time.time() - t_start, 1)}


def _drafter(layers: list[Layer], x: torch.Tensor, b: int, q: int) -> torch.Tensor:
    for layer in layers:
        x = layer.forward(x, b, q)
    return x


def grouped_mm_works(s: Shape) -> bool:
    if s.device != "cuda" or not hasattr(torch, "_grouped_mm"):
        return False
    try:
        a = torch.randn(32, 64, device="cuda", dtype=s.dtype)
        w = torch.randn(2, 128, 64, device="cuda", dtype=s.dtype)
        torch._grouped_mm(a, w.transpose(-2, -1), offs=torch.tensor([16, 32], device="cuda", dtype=torch.int32))
        return True
    except (RuntimeError, NotImplementedError):
        return False


def main() -> None:
    global GROUPED_MM
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--smoke", action="store_true", help="a few layers, small widths: check the script runs")
    args = ap.parse_args()
    s = SHAPES[args.shape]
    if args.smoke:
        s = replace(s, hidden=256, layers=4, layers_measured=2, heads=4, kv_heads=2, head_dim=64,
                    ffn=128 if s.experts else 512, vocab=1000, experts=min(s.experts, 16),
                    top_k=min(s.top_k, 4), ctx=64)
    if s.tp > 1:
        torch.distributed.init_process_group("nccl")
        torch.cuda.set_device(rank())
    torch.manual_seed(rank())
    GROUPED_MM = grouped_mm_works(s)
    with torch.inference_mode():
        result = measure(s)
    if rank() == 0:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        print(f"wrote {args.out} in {result['seconds']} s", flush=True)
    if s.tp > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
