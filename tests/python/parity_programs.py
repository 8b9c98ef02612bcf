"""The parity programs of test_device_parity.py (issue 14), apart from the test so that a child
Python can train them on the local reference device without importing rgpu: once rgpu registers
its PrivateUse1 backend, torch takes it for the process's accelerator and every backward on local
cuda tensors trips an internal assert of the autograd engine (pytorch/pytorch#161129), so the
local cuda reference cannot run in the process that uses rgpu.

Run as a script it is that child: python parity_programs.py DEVICE OUT trains every program on
DEVICE and saves {name: (shape, losses, weights, initial weights)} to OUT (torch.save). This
module imports torch only."""
import copy
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

STEPS = 24
SEED = 1234


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


def build(name):
    """The program's model, optimizer factory and step, from the fixed seed: the same initial
    weights and data in every process (all drawn on the cpu generator)."""
    torch.manual_seed(SEED)
    return PROGRAMS[name]()


def reference(device):
    """Every program trained on device: {name: (shape, losses, weights, initial weights)}."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # as the opserver of the tests runs (device_fixtures.OpServer)
    try:
        out = {}
        for name in PROGRAMS:
            model, make_opt, step = build(name)
            initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
            out[name] = (*train(copy.deepcopy(model), make_opt, step, device), initial)
        return out
    finally:
        torch.set_num_threads(before)


if __name__ == "__main__":
    device, path = sys.argv[1], sys.argv[2]
    if device == "cuda":
        # TF32 as a C++ torch program has it (what rgpu-opserver --device cuda runs with): off for
        # matmuls, on for cuDNN convolutions (torch's defaults; set here so that an environment
        # that changed them cannot make the two sides differ).
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = True
        accelerator = torch.accelerator.current_accelerator()
        assert accelerator is not None and accelerator.type == "cuda", accelerator
    result = reference(device)
    assert "rgpu" not in sys.modules, "the reference process imported rgpu"
    torch.save(result, path)
