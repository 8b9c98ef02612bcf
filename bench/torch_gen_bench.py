"""Generation benchmark of the rgpu PyTorch device (issue 14, item 10): a small GPT samples tokens
with a growing sequence, on the local cpu and on rgpu, in interleaved runs (local, rgpu, local,
rgpu, ...), without a KV cache (each token runs the whole sequence again) and with one (each token
runs one position against the cached keys and values).

  python bench/torch_gen_bench.py --out result.json [--tokens 200] [--pairs 5] [--modes nokv,kv]
                                  [--steps 6] [--train-pairs 7]

The rgpu runs use $RGPU_OPSERVER, else an rgpu-opserver of their own (--device cpu, from
$RGPU_BUILD_DIR or build/). The same model and prompt run on both devices; each token is sampled
on the device that runs the model (torch.multinomial), and the only read is the whole sequence
at the end, as a program that prints its sample would. Writes and prints, per mode: tokens/s of
each run, the medians, rgpu/local (target >= 0.8), and the meta cache misses of one rgpu run of
--tokens tokens (rgpu.stats(): each is a call whose output shapes the client had to find on its
meta device).

With --train-pairs N it also times training steps of a small GPT (the model of the generation
runs at a training size), local and rgpu alternating, N pairs of --steps steps each, and writes
the median over pairs of rgpu/local step time (target <= 1.10)."""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))


def start_opserver(extra_args=(), extra_env=()):
    """An rgpu-opserver --device cpu on a free port, unless RGPU_OPSERVER names one."""
    if os.environ.get("RGPU_OPSERVER"):
        return None
    build = Path(os.environ.get("RGPU_BUILD_DIR", ROOT / "build")).resolve()
    os.environ["RGPU_BUILD_DIR"] = str(build)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))
    env.update(kv.split("=", 1) for kv in extra_env)
    proc = subprocess.Popen([str(build / "bin" / "rgpu-opserver"), "--device", "cpu", "--listen", f"127.0.0.1:{port}",
                             *extra_args],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    os.environ["RGPU_OPSERVER"] = f"127.0.0.1:{port}"
    return proc


class GPT(torch.nn.Module):
    """nanoGPT-like: learned positions, pre-norm blocks, sdpa attention; forward(idx, cache) with
    cache a list of per-layer [k, v] (None: no KV cache)."""

    def __init__(self, V=65, T=256, D=128, H=4, L=4):
        super().__init__()
        self.H, self.T = H, T
        self.tok, self.pos = torch.nn.Embedding(V, D), torch.nn.Embedding(T, D)
        self.blocks = torch.nn.ModuleList()
        for _ in range(L):
            b = torch.nn.Module()
            b.ln1, b.ln2 = torch.nn.LayerNorm(D), torch.nn.LayerNorm(D)
            b.qkv, b.proj = torch.nn.Linear(D, 3 * D), torch.nn.Linear(D, D)
            b.fc, b.out = torch.nn.Linear(D, 4 * D), torch.nn.Linear(4 * D, D)
            self.blocks.append(b)
        self.ln, self.head = torch.nn.LayerNorm(D), torch.nn.Linear(D, V, bias=False)

    def forward(self, idx, cache=None, start=0):
        B, t = idx.shape
        D = self.tok.embedding_dim
        x = self.tok(idx) + self.pos(torch.arange(start, start + t, device=idx.device))
        for i, b in enumerate(self.blocks):
            q, k, v = b.qkv(b.ln1(x)).view(B, t, 3, self.H, D // self.H).permute(2, 0, 3, 1, 4)
            if cache is not None:
                if cache[i] is not None:
                    k = torch.cat([cache[i][0], k], dim=2)
                    v = torch.cat([cache[i][1], v], dim=2)
                cache[i] = [k, v]
            # With a cache, a step's one query attends to every cached position: no mask.
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
            x = x + b.proj(a.transpose(1, 2).reshape(B, t, D))
            x = x + b.out(torch.nn.functional.gelu(b.fc(b.ln2(x))))
        return self.head(self.ln(x))


@torch.no_grad()
def generate(model, prompt, tokens, kv):
    idx = prompt
    cache = [None] * len(model.blocks) if kv else None
    step_in, start = idx, 0
    for _ in range(tokens):
        if kv:
            logits = model(step_in, cache, start)
            start += step_in.shape[1]
        else:
            logits = model(idx[:, -model.T:])
        probs = torch.softmax(logits[:, -1, :] / 0.8, dim=-1)
        nxt = torch.multinomial(probs, 1)
        idx = torch.cat([idx, nxt], dim=1)
        step_in = nxt
    return idx.cpu()


def model_on(device):
    torch.manual_seed(0)
    return GPT().to(device).eval()


def time_generation(models, prompt, tokens, kv):
    out = {}
    for device, model in models.items():
        t = time.perf_counter()
        seq = generate(model, prompt.to(device), tokens, kv)
        out[device] = time.perf_counter() - t
        assert seq.shape[1] == prompt.shape[1] + tokens
    return out


def train_step(model, opt, batch, V):
    logits = model(batch[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), batch[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--modes", default="nokv,kv")
    ap.add_argument("--train-pairs", type=int, default=0)
    ap.add_argument("--steps", type=int, default=6, help="training steps per timed run (after one warm-up)")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="an argument for the rgpu-opserver this starts (e.g. --no-cpu-buffer-reuse)")
    ap.add_argument("--server-env", action="append", default=[], metavar="NAME=VALUE",
                    help="an environment variable for the rgpu-opserver this starts (e.g. OMP_WAIT_POLICY=ACTIVE)")
    a = ap.parse_args()
    server = start_opserver(a.server_arg, a.server_env)
    try:
        import rgpu

        res = {"tokens": a.tokens, "pairs": a.pairs, "server_args": a.server_arg, "server_env": a.server_env, "threads": torch.get_num_threads(),
               "torch": torch.__version__, "server": rgpu.server_info() if hasattr(rgpu, "server_info") else None}
        models = {"cpu": model_on("cpu"), "rgpu": model_on("rgpu")}
        prompt = torch.randint(0, 65, (1, 8), generator=torch.Generator().manual_seed(1))
        for mode in [m for m in a.modes.split(",") if m]:
            kv = mode == "kv"
            # Warm-up, then one rgpu run alone to count its meta misses.
            time_generation(models, prompt, 8, kv)
            before = rgpu.stats()
            generate(models["rgpu"], prompt.to("rgpu"), a.tokens, kv)
            after = rgpu.stats()
            runs = [time_generation(models, prompt, a.tokens, kv) if i % 2 == 0 else
                    dict(reversed(list(time_generation(dict(reversed(list(models.items()))), prompt, a.tokens, kv).items())))
                    for i in range(a.pairs)]
            tps = {d: [a.tokens / r[d] for r in runs] for d in models}
            med = {d: statistics.median(v) for d, v in tps.items()}
            res[mode] = {
                "tokens_per_s": tps, "median_tokens_per_s": med,
                "ratio_rgpu_local": med["rgpu"] / med["cpu"],
                "pair_ratios": [r["cpu"] / r["rgpu"] for r in runs],
                "meta_misses": after["meta_misses"] - before["meta_misses"],
                "meta_hits": after["meta_hits"] - before["meta_hits"],
                "posts": after["posts"] - before["posts"], "waits": after["waits"] - before["waits"],
                "target_ratio": 0.8,
            }
            r = res[mode]
            print(f"{mode}: local {med['cpu']:.1f} tok/s, rgpu {med['rgpu']:.1f} tok/s, ratio {r['ratio_rgpu_local']:.3f}; "
                  f"{r['meta_misses']} meta misses, {r['meta_hits']} hits, {r['posts']} posts, {r['waits']} waits "
                  f"per {a.tokens} tokens", flush=True)
        if a.train_pairs:
            V = 65
            tm = {"cpu": GPT(T=128, D=192, H=6, L=4), "rgpu": None}
            torch.manual_seed(0)
            tm["cpu"] = GPT(T=128, D=192, H=6, L=4).train()
            torch.manual_seed(0)
            tm["rgpu"] = GPT(T=128, D=192, H=6, L=4).to("rgpu").train()
            opts = {d: torch.optim.AdamW(m.parameters(), lr=3e-4) for d, m in tm.items()}
            data = torch.randint(0, V, (16, 129), generator=torch.Generator().manual_seed(2))
            batches = {"cpu": data, "rgpu": data.to("rgpu")}
            for d in tm:
                train_step(tm[d], opts[d], batches[d], V)
            step_s = {"cpu": [], "rgpu": []}
            for i in range(a.train_pairs):
                for d in (("cpu", "rgpu") if i % 2 == 0 else ("rgpu", "cpu")):
                    t = time.perf_counter()
                    for _ in range(a.steps):
                        train_step(tm[d], opts[d], batches[d], V)
                    step_s[d].append((time.perf_counter() - t) / a.steps)
            ratios = [r / c for r, c in zip(step_s["rgpu"], step_s["cpu"])]
            res["train"] = {"model": "GPT V=65 T=128 D=192 H=6 L=4, batch 16, AdamW", "steps_per_run": a.steps,
                            "step_s": step_s, "pair_ratios": ratios, "median_ratio_rgpu_local": statistics.median(ratios),
                            "median_step_s": {d: statistics.median(v) for d, v in step_s.items()}, "target_ratio": 1.10}
            t = res["train"]
            print(f"train: local {t['median_step_s']['cpu'] * 1e3:.1f} ms, rgpu {t['median_step_s']['rgpu'] * 1e3:.1f} ms, "
                  f"median pair ratio {t['median_ratio_rgpu_local']:.3f}", flush=True)
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    finally:
        if server:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    sys.exit(main())
