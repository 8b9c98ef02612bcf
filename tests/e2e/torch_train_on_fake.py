"""A small transformer trained the way users train one, with stock PyTorch (the CUDA build from
PyPI), unmodified: run by tests/e2e/test_torch_train.py through the shim against rgpu-server on
the fake driver with RGPU_FAKE_NOOP_KERNELS=1, so every kernel launch succeeds and computes
nothing. What it proves is the path from start-up to exit: cuBLAS and cuBLASLt handles, their
heuristics and workspaces, autocast, AdamW's multi-tensor kernels, the caching allocator, events
and streams, all answered as the real driver answers them. The numbers it computes mean nothing.

Three phases, each a few optimizer steps of a two-layer decoder: fp32 with PyTorch's default BLAS
choice (cuBLAS for batched matmuls, cuBLASLt for a linear layer's matmul with bias), bf16
autocast (cuBLASLt's bf16 paths), and fp32 with cuBLASLt preferred for every matmul. Prints
"phase NAME ok" for each, "libraries ..." with the CUDA libraries mapped, then "done"."""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, DIM, HEADS, LAYERS, SEQ, BATCH, STEPS = 512, 128, 4, 2, 64, 8, 3


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.proj = nn.Linear(DIM, DIM)
        self.ln2 = nn.LayerNorm(DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        # Attention written out: two batched matmuls (cublasGemmStridedBatched), a causal mask.
        att = (q @ k.transpose(-2, -1)) * (DIM // HEADS) ** -0.5
        att = att.masked_fill(torch.ones(t, t, device=x.device, dtype=torch.bool).triu(1), float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, DIM)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(SEQ, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def train(model, opt, autocast_dtype):
    for _ in range(STEPS):
        idx = torch.randint(0, VOCAB, (BATCH, SEQ + 1), device="cuda")
        with torch.autocast("cuda", dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
            logits = model(idx[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), idx[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    loss.item()  # a copy to the host, after a synchronize
    torch.cuda.synchronize()


torch.manual_seed(0)
model = Model().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
train(model, opt, None)
print("phase fp32 ok", flush=True)
train(model, opt, torch.bfloat16)
print("phase bf16-autocast ok", flush=True)
torch.backends.cuda.preferred_blas_library("cublaslt")
train(model, opt, None)
print("phase fp32-cublaslt ok", flush=True)

with open("/proc/self/maps") as f:
    maps = f.read()
libs = sorted({name for name in ("libcublas.so", "libcublasLt.so") if name in maps})
print("libraries " + " ".join(libs))
print("done", flush=True)
sys.exit(0)
