"""Parity programs (issue 14): small models as their public originals write them (a GPT with
tied input and output embeddings, word-level LSTM and GRU language models with tied weights, a
DCGAN, a model whose submodules are shared), each trained for 24 steps with the same seed on the
reference device and on rgpu, with dropout off. Asserted: the same parameters (tensors, elements,
optimizer groups), every step's losses within 1e-5 relative, final weights within 1e-5.

The reference is the local cpu against rgpu-opserver --device cpu (CI), and the local GPU
against --device cuda (tests/gpu/run.sh), so both sides run the same kernels. Models, data and
noise are drawn on the cpu and moved, as such programs do, so no device generator is involved."""
import copy

import pytest
from device_fixtures import ON_CUDA, opserver, use_opserver  # noqa: F401,E402  (fixtures; skips without torch)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import rgpu  # noqa: F401,E402

STEPS = 24
REF = "cuda" if ON_CUDA else "cpu"
if ON_CUDA and not torch.cuda.is_available():
    pytest.skip("the reference for an rgpu-opserver --device cuda is the local GPU, which this torch cannot use",
                allow_module_level=True)
# Both sides run the same kernels; what is left is the order of a few reductions (the optimizers'
# _foreach_ kernels on rgpu against per-tensor loops on cpu), far below these.
RTOL = ATOL = 1e-5


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # The local reference on one thread: these models are far too small to gain from more, and on
    # a loaded machine OpenMP's waiting threads made a DCGAN step take a second instead of 20 ms.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --- a GPT with tied embeddings (as nanoGPT writes it) -----------------------------------------

class Attention(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        # No bias on qkv (nanoGPT's bias=False): the keys' bias has a zero gradient (softmax ignores
        # a shift shared by all keys), and Adam would turn its rounding noise into full-size steps.
        self.qkv, self.proj = nn.Linear(c, 3 * c, bias=False), nn.Linear(c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.0)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.ln1, self.attn, self.ln2 = nn.LayerNorm(c), Attention(c, heads), nn.LayerNorm(c)
        self.mlp = nn.Sequential(nn.Linear(c, 4 * c), nn.GELU(), nn.Linear(4 * c, c), nn.Dropout(0.0))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab=40, ctx=12, c=32, heads=4, layers=2):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, c), nn.Embedding(ctx, c)
        self.drop = nn.Dropout(0.0)
        self.h = nn.ModuleList(Block(c, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(c)
        self.lm_head = nn.Linear(c, vocab, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying, as GPT-2

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    def optimizer(self):
        # nanoGPT's configure_optimizers: matrices decay, biases and norms do not.
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        rest = [p for p in params if p.dim() < 2]
        return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                                 lr=3e-3, betas=(0.9, 0.95))


def gpt_program():
    model = GPT()
    data = torch.randint(0, 40, (STEPS, 4, 13))
    xs, ys = data[:, :, :-1].contiguous(), data[:, :, 1:].contiguous()

    def step(model, opt, k, device):
        opt.zero_grad(set_to_none=True)
        loss = model(xs[k].to(device), ys[k].to(device))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return [loss]

    return model, lambda m: m.optimizer(), step


# --- word-level language models (as pytorch/examples word_language_model writes them) ----------

class RNNModel(nn.Module):
    def __init__(self, kind, ntoken=50, ninp=24, nlayers=2):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = getattr(nn, kind)(ninp, ninp, nlayers, dropout=0.0)
        self.decoder = nn.Linear(ninp, ntoken)
        self.decoder.weight = self.encoder.weight  # tied, as with --tied
        self.kind, self.nlayers, self.nhid = kind, nlayers, ninp

    def forward(self, x, hidden):
        out, hidden = self.rnn(self.encoder(x), hidden)
        return F.log_softmax(self.decoder(out), dim=-1), hidden

    def init_hidden(self, bsz, device):
        h = torch.zeros(self.nlayers, bsz, self.nhid, device=device)
        return (h, h.clone()) if self.kind == "LSTM" else h


def rnn_program(kind):
    def program():
        model = RNNModel(kind)
        corpus = torch.randint(0, 50, (STEPS * 6 + 1, 5))  # (sequence, batch), as batchify makes it
        state = {}

        def step(model, opt, k, device):
            if k == 0:
                state["hidden"] = model.init_hidden(5, device)
            x = corpus[k * 6:(k + 1) * 6].to(device)
            y = corpus[k * 6 + 1:(k + 1) * 6 + 1].to(device)
            # Truncated backpropagation through time: the hidden state carries over, detached.
            h = state["hidden"]
            h = tuple(t.detach() for t in h) if isinstance(h, tuple) else h.detach()
            model.zero_grad()
            out, state["hidden"] = model(x, h)
            loss = F.nll_loss(out.view(-1, 50), y.reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            opt.step()
            return [loss]

        return model, lambda m: torch.optim.SGD(m.parameters(), lr=0.5), step
    return program


# --- a DCGAN (as pytorch/examples dcgan writes it, at 16x16) ------------------------------------

class Generator(nn.Module):
    def __init__(self, nz=8, ngf=8, nc=3):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 4), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 2), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, nc, 4, 2, 1, bias=False), nn.Tanh())

    def forward(self, z):
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self, ndf=8, nc=3):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, 1, 4, 1, 0, bias=False), nn.Sigmoid())

    def forward(self, x):
        return self.main(x).view(-1, 1).squeeze(1)


def weights_init(m):
    name = m.__class__.__name__
    if "Conv" in name:
        nn.init.normal_(m.weight, 0.0, 0.02)
    elif "BatchNorm" in name:
        nn.init.normal_(m.weight, 1.0, 0.02)
        nn.init.zeros_(m.bias)


class GAN(nn.Module):
    def __init__(self):
        super().__init__()
        self.G, self.D = Generator(), Discriminator()
        self.apply(weights_init)


def gan_program():
    model = GAN()
    real = torch.rand(STEPS, 6, 3, 16, 16) * 2 - 1
    noise = torch.randn(STEPS, 6, 8, 1, 1)

    def make_opt(m):
        return (torch.optim.Adam(m.D.parameters(), lr=2e-4, betas=(0.5, 0.999)),
                torch.optim.Adam(m.G.parameters(), lr=2e-4, betas=(0.5, 0.999)))

    def step(model, opts, k, device):
        opt_d, opt_g = opts
        x, z = real[k].to(device), noise[k].to(device)
        ones, zeros = torch.ones(6, device=device), torch.zeros(6, device=device)
        model.D.zero_grad()
        err_real = F.binary_cross_entropy(model.D(x), ones)
        err_real.backward()
        fake = model.G(z)
        err_fake = F.binary_cross_entropy(model.D(fake.detach()), zeros)
        err_fake.backward()
        opt_d.step()
        model.G.zero_grad()
        err_g = F.binary_cross_entropy(model.D(fake), ones)
        err_g.backward()
        opt_g.step()
        return [err_real + err_fake, err_g]

    return model, make_opt, step


# --- shared submodules (one block applied at several depths, a layer used by two branches) ------

class Shared(nn.Module):
    def __init__(self, c=16):
        super().__init__()
        self.inp = nn.Linear(6, c)
        self.block = nn.Sequential(nn.Linear(c, c), nn.LayerNorm(c), nn.SiLU())
        self.layers = nn.ModuleList([self.block, nn.Linear(c, c), self.block])  # ALBERT-like reuse
        self.branch_a = nn.Sequential(nn.Linear(c, c), nn.ReLU())
        self.branch_b = nn.Sequential(self.branch_a[0], nn.Tanh())  # the same Linear in both branches
        self.head = nn.Linear(c, 3)

    def forward(self, x):
        x = self.inp(x)
        for layer in self.layers:
            x = x + layer(x)
        return self.head(self.branch_a(x) + self.branch_b(x))


def shared_program():
    model = Shared()
    xs, ys = torch.randn(STEPS, 16, 6), torch.randint(0, 3, (STEPS, 16))

    def step(model, opt, k, device):
        opt.zero_grad()
        loss = F.cross_entropy(model(xs[k].to(device)), ys[k].to(device))
        loss.backward()
        opt.step()
        return [loss]

    return model, lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, nesterov=True), step


# --- the harness --------------------------------------------------------------------------------

def groups(opt):
    opts = opt if isinstance(opt, tuple) else (opt,)
    return [[p.numel() for p in g["params"]] for o in opts for g in o.param_groups]


def train(model, make_opt, step, device):
    model.to(device)
    opt = make_opt(model)
    shape = {"tensors": len(list(model.parameters())), "elements": sum(p.numel() for p in model.parameters()),
             "groups": groups(opt)}
    losses = []
    for k in range(STEPS):
        losses.append(torch.stack([loss.detach() for loss in step(model, opt, k, device)]).cpu())
    return shape, torch.stack(losses), {k: v.detach().cpu() for k, v in model.state_dict().items()}


PROGRAMS = {
    "gpt_tied": gpt_program,
    "lstm_lm": rnn_program("LSTM"),
    "gru_lm": rnn_program("GRU"),
    "dcgan": gan_program,
    "shared_submodules": shared_program,
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_training_matches_the_reference(name):
    torch.manual_seed(1234)
    model, make_opt, step = PROGRAMS[name]()
    ref_shape, ref_losses, ref_weights = train(copy.deepcopy(model), make_opt, step, REF)
    shape, losses, weights = train(copy.deepcopy(model), make_opt, step, "rgpu")
    assert shape == ref_shape
    # The model learns (the comparison is of a real training run, not of a constant).
    assert losses[-1].sum() != losses[0].sum()
    for k in range(STEPS):
        torch.testing.assert_close(losses[k], ref_losses[k], rtol=RTOL, atol=0,
                                   msg=lambda m, k=k: f"{name}: step {k} losses differ from {REF}'s\n{m}")
    assert list(weights) == list(ref_weights)
    for key in weights:
        torch.testing.assert_close(weights[key], ref_weights[key], rtol=RTOL, atol=ATOL,
                                   msg=lambda m, key=key: f"{name}: final {key} differs from {REF}'s\n{m}")


def test_the_tie_is_one_parameter_on_both_devices():
    # What the untied bug showed first: nanoGPT's count of decayed tensors and parameters.
    torch.manual_seed(0)
    model = GPT()
    n_cpu = sum(p.numel() for p in model.parameters())
    model.to("rgpu")
    assert model.wte.weight is model.lm_head.weight
    assert sum(p.numel() for p in model.parameters()) == n_cpu
    assert len(model.optimizer().param_groups[0]["params"]) == 2 + 2 * 4  # lm_head (= wte), wpe, four per block
