"""A small GPT trained on characters, nanoGPT-style: the training example of the docs site
(docs/training.md). It runs the same on any of PyTorch's devices, so one script shows both of
rgpu's paths:

    python examples/train_gpt.py --device rgpu     # the PyTorch device: import rgpu, rgpu-opserver
    python examples/train_gpt.py --device cuda     # stock CUDA torch; through rgpu with the shim
    python examples/train_gpt.py --device cpu      # the yardstick, no GPU at all

It learns to continue a text file (default: docs/architecture.md of this repository, so it needs
no download), prints the loss every --log-every steps (each print is the one time a step waits
for the GPU), then samples a few characters from the trained model.
"""
from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then an MLP, each with a residual."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, context: int, dim: int, heads: int, layers: int):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return self.head(self.ln(self.blocks(x)))


@torch.no_grad()
def sample(model: GPT, start: torch.Tensor, n: int, context: int) -> torch.Tensor:
    """Appends n sampled tokens to start (1 x T), all on the model's device; one read at the end."""
    idx = start
    for _ in range(n):
        logits = model(idx[:, -context:])[:, -1, :]
        idx = torch.cat([idx, torch.multinomial(F.softmax(logits, dim=-1), 1)], dim=1)
    return idx


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="rgpu", help="rgpu, cuda or cpu (default rgpu)")
    p.add_argument("--data", type=Path, default=REPO / "docs" / "architecture.md", help="a text file to learn")
    # The defaults make a model small enough to train in seconds on a CPU (a first run, a test);
    # docs/training.md gives the sizes of bench/train_bench.py's small model for a GPU.
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--context", type=int, default=32)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the model (backend rgpu on the rgpu device: Inductor runs in rgpu-opserver)")
    p.add_argument("--sample", type=int, default=80, help="characters to sample after training (0: none)")
    args = p.parse_args()

    if args.device.startswith("rgpu"):
        import rgpu  # noqa: F401  (adds the device; RGPU_OPSERVER says where rgpu-opserver is)

    text = args.data.read_text(encoding="utf-8")
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([index[c] for c in text], dtype=torch.long)
    if len(data) <= args.context + 1:
        p.error(f"{args.data} has {len(data)} characters; it needs more than --context + 1 = {args.context + 1}")

    torch.manual_seed(0)
    model = GPT(len(chars), args.context, args.dim, args.heads, args.layers).to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step_fn = model
    if args.compile:
        step_fn = torch.compile(model, backend="rgpu" if args.device.startswith("rgpu") else "inductor")
    print(f"train_gpt: {sum(t.numel() for t in model.parameters()) / 1e6:.2f}M parameters on {args.device}, "
          f"{len(chars)} characters of vocabulary from {args.data.name}")

    # Batches are cut on the host and copied over: a copy to the device does not wait for it.
    gen = torch.Generator().manual_seed(1)
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        at = torch.randint(len(data) - args.context - 1, (args.batch,), generator=gen)
        x = torch.stack([data[i:i + args.context] for i in at]).to(args.device)
        y = torch.stack([data[i + 1:i + 1 + args.context] for i in at]).to(args.device)
        loss = F.cross_entropy(step_fn(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % args.log_every == 0 or step == args.steps:
            value = loss.item()  # the step's one wait for the device
            if not math.isfinite(value):
                raise SystemExit(f"train_gpt: the loss is {value} at step {step}")
            print(f"step {step:4d}  loss {value:.3f}  {(time.perf_counter() - start) * 1e3 / step:.1f} ms/step")

    if args.sample:
        model.eval()
        out = sample(model, data[:1].view(1, 1).to(args.device), args.sample, args.context)
        print("sample:", repr("".join(chars[i] for i in out[0].tolist())))


if __name__ == "__main__":
    main()
