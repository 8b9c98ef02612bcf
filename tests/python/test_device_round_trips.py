"""Round trips of a training step on rgpu (docs/design.md §3, §5; issue 5): a small transformer
(embedding, layer norm, attention, GELU MLP, cross-entropy, AdamW) trained on the device waits
for the server once per step, at the loss read, and after warm-up takes every op's output
metadata from the fallback's cache rather than from the meta device (aten/meta_cache.h).
bench/train_bench.py --device rgpu reports the same counters for the benchmark models."""
from device_fixtures import opserver, use_opserver  # noqa: F401,E402  (fixtures; skips without torch)
import torch  # noqa: E402

import rgpu  # noqa: E402

D = "rgpu"
V, T, C, H, L, B = 17, 8, 16, 2, 2, 3


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(C), torch.nn.LayerNorm(C)
        self.qkv, self.proj = torch.nn.Linear(C, 3 * C), torch.nn.Linear(C, C)
        self.fc, self.out = torch.nn.Linear(C, 4 * C), torch.nn.Linear(4 * C, C)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, H, C // H).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, C))
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))


class GPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(V, C), torch.nn.Embedding(T, C)
        self.blocks = torch.nn.ModuleList([Block() for _ in range(L)])
        self.ln, self.head = torch.nn.LayerNorm(C), torch.nn.Linear(C, V, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def trainer(device):
    torch.manual_seed(0)
    model = GPT().to(device)
    data = torch.randint(0, V, (B, T + 1), generator=torch.Generator().manual_seed(1)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)

    def step():
        logits = model(data[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), data[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    return step


def test_a_transformer_training_step_waits_once_for_the_loss():
    step = trainer(D)
    step()  # warm-up: the optimizer state and the meta cache fill
    step()
    before = rgpu.stats()
    for _ in range(3):
        step()
    after = rgpu.stats()
    waits = (after["waits"] - before["waits"]) / 3
    by_reason = {k: n - before["waits_by_reason"].get(k, 0) for k, n in after["waits_by_reason"].items()}
    assert waits <= 1, f"{waits} blocking round trips per step; what waited (3 steps): {by_reason}"
    assert {k: n for k, n in by_reason.items() if n} == {"read": 3}, by_reason
    assert after["posts"] > before["posts"]
    # Storage allocations and frees ride in the op frames (protocol/torch_wire.h, kWithStorage): about 150
    # one-way messages a step here, 430 when each was a message of its own.
    posts = (after["posts"] - before["posts"]) / 3
    assert posts <= 200, f"{posts} one-way messages per step (allocations and frees are to ride in op frames)"
    assert after["meta_misses"] == before["meta_misses"], "ops still ran on the meta device after warm-up"
    assert after["meta_hits"] > before["meta_hits"]


def test_cached_metadata_trains_like_the_cpu():
    # The cache must not change results: the same steps on the cpu give the same losses.
    dev, cpu = trainer(D), trainer("cpu")
    dev_losses = [dev() for _ in range(4)]
    cpu_losses = [cpu() for _ in range(4)]
    torch.testing.assert_close(torch.tensor(dev_losses), torch.tensor(cpu_losses), rtol=1e-4, atol=1e-5)


def test_cache_keys_tell_shapes_dtypes_and_aliasing_apart():
    # Same op, different signatures: each gets its own metadata.
    a = torch.ones(2, 3, device=D)
    b = torch.ones(4, 3, device=D)
    assert (a + 1).shape == (2, 3) and (b + 1).shape == (4, 3)
    assert (a + 1).t().contiguous().shape == (3, 2)
    assert (a.t() + 1).stride() == (1, 3)  # elementwise ops keep the input's (transposed) layout
    assert (a.double() + 1).dtype == torch.float64
    assert (a.int() + 1).dtype == torch.int32 and (a.int() + 1.5).dtype == torch.float32
    c = torch.zeros(5, device=D)
    torch.add(c[1:3], 1, out=c[1:3])  # an out= view of the same storage
    assert c.cpu().tolist() == [0, 1, 1, 0, 0]
    x = torch.arange(4.0, device=D)
    assert torch.arange(0, 3, device=D).shape == (3,) and torch.arange(0, 5, device=D).shape == (5,)
    assert x.sum(0).shape == () and x.view(2, 2).sum(0).shape == (2,)
