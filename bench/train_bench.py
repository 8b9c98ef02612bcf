"""Training-step benchmark (issue 4): a model trained with stock PyTorch on `cuda`, timed per step.
Run it once on the local GPU and once through rgpu (shim on LD_LIBRARY_PATH, RGPU_SERVER set);
bench/run_train_bench.sh does both, at several added round-trip delays, and writes the table.

  python bench/train_bench.py --model small|gpt2|tiny --steps N --out result.json

Prints and writes: median step time (after warm-up steps), the time from process start to the
end of the first step (RGPU_BENCH_T0 = the launcher's clock when it started the process, in
seconds since the epoch; else this interpreter's start), the losses (to compare runs), and,
through rgpu with RGPU_STATS set, the round trips per step (from two stats snapshots)."""
import argparse
import json
import os
import statistics
import time

T0 = float(os.environ.get("RGPU_BENCH_T0", time.time()))

import torch  # noqa: E402  (imported after T0: its import is part of the time to first step)

# Where the time to the first step goes: seconds from T0 at each point of the way there (host
# clock, no synchronize added, so a mark is when the program got there, GPU work maybe pending).
MARKS = {"torch_imported": time.time() - T0}


def model_and_batch(kind):
    torch.manual_seed(0)
    if kind == "small":  # 6-layer nanoGPT-like: d=384, T=256, B=64 (gpu-machine.md baseline 37.6 ms)
        V, T, D, H, L, B = 65, 256, 384, 6, 6, 64
    elif kind == "tiny":  # the same shape of model, small enough that a 2-core CPU steps it in tens of ms
        V, T, D, H, L, B = 65, 64, 64, 4, 4, 8
    else:  # GPT-2 small: 124M, T=1024, B=8 (baseline 59.8 ms)
        V, T, D, H, L, B = 50304, 1024, 768, 12, 12, 8

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = torch.nn.LayerNorm(D), torch.nn.LayerNorm(D)
            self.qkv, self.proj = torch.nn.Linear(D, 3 * D), torch.nn.Linear(D, D)
            self.fc, self.out = torch.nn.Linear(D, 4 * D), torch.nn.Linear(4 * D, D)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
            return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))

    class GPT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = torch.nn.Embedding(V, D), torch.nn.Embedding(T, D)
            self.blocks = torch.nn.ModuleList([Block() for _ in range(L)])
            self.ln, self.head = torch.nn.LayerNorm(D), torch.nn.Linear(D, V, bias=False)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x))

    g = torch.Generator().manual_seed(1)
    data = torch.randint(0, V, (B, T + 1), generator=g)
    return GPT(), data, V


def stats_snapshot(device):
    """Round-trip counters now: from rgpu.stats() on the rgpu device, else the shim's RGPU_STATS
    file, written now (None when neither applies)."""
    if device == "rgpu":
        import rgpu

        s = rgpu.stats()
        # One shape for both paths: "round_trips" counts calls that waited for the server.
        return {"round_trips": s["waits"], "one_way": s["posts"], "bytes_sent": s["bytes_sent"],
                "meta_misses": s["meta_misses"],
                "ops": [{"op": why, "waited": n} for why, n in s["waits_by_reason"].items()]}
    path = os.environ.get("RGPU_STATS")
    if not path:
        return None
    import ctypes

    try:  # the shim writes its stats file on demand through this entry point, if present
        lib = ctypes.CDLL("libcuda.so.1")
        fn = getattr(lib, "rgpu_stats_write", None)
        if fn is None or fn() != 0:
            return None
        return json.load(open(path))
    except (OSError, ValueError, KeyError):
        return None


def waits_between(before, after, steps):
    """Which calls waited for the server between two snapshots, per step: the list to shrink."""
    if before is None or after is None or steps <= 0:
        return None
    was = {o["op"]: o["waited"] for o in before.get("ops", [])}
    per_step = {o["op"]: (o["waited"] - was.get(o["op"], 0)) / steps for o in after.get("ops", [])}
    return {op: n for op, n in sorted(per_step.items(), key=lambda kv: -kv[1]) if n > 0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["small", "gpt2", "tiny"], default="small")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", choices=["cuda", "rgpu", "cpu"], default="cuda",
                    help="cuda: stock torch (locally or through the driver shim); rgpu: the rgpu device "
                         "(import rgpu, served by rgpu-opserver); cpu: stock torch on the cpu (the baseline "
                         "of an rgpu-opserver --device cpu)")
    ap.add_argument("--fp32", action="store_true", help="no bf16 autocast (the rgpu device runs fp32)")
    ap.add_argument("--fused", choices=["auto", "on", "off"], default="auto",
                    help="AdamW's fused kernel: auto = on for cuda only (the first wave's baseline); on for "
                         "rgpu runs the same program as a local cuda run with fused=True")
    ap.add_argument("--compile", default=None, metavar="BACKEND",
                    help="torch.compile the model with BACKEND (rgpu on the rgpu device: each captured graph "
                         "runs as one remote call; inductor for a local run); the warm-up steps include "
                         "the compile")
    a = ap.parse_args()
    if a.device in ("rgpu", "cpu"):
        if a.device == "rgpu":
            import rgpu  # noqa: F401  (registers the device)
        a.fp32 = True
    model, data, V = model_and_batch(a.model)
    MARKS["model_built"] = time.time() - T0
    model = model.to(a.device)
    batch = data.to(a.device)
    if a.compile:
        model = torch.compile(model, backend=a.compile)
    MARKS["on_device"] = time.time() - T0
    fused = a.device == "cuda" if a.fused == "auto" else a.fused == "on"
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=fused)
    times, cpu_times, losses = [], [], []
    first_step_s = None
    snap_before = None
    for i in range(a.steps):
        if i == a.warmup:
            snap_before = stats_snapshot(a.device)
        t = time.perf_counter()
        c = time.process_time()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=not a.fp32):
            logits = model(batch[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V).float(), batch[:, 1:].reshape(-1))
        if i == 0:
            MARKS["forward"] = time.time() - T0
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if i == 0:
            MARKS["backward"] = time.time() - T0
        opt.step()
        if i == 0:
            MARKS["optimizer"] = time.time() - T0
        losses.append(loss.item())  # the one read per step: the loop's only wait
        times.append(time.perf_counter() - t)
        cpu_times.append(time.process_time() - c)
        if i == 0:
            first_step_s = time.time() - T0
    snap_after = stats_snapshot(a.device)
    measured = a.steps - a.warmup
    steady = times[a.warmup:] or times
    res = {
        "model": a.model,
        "device": a.device,
        "autocast": not a.fp32,
        "through_rgpu": bool(os.environ.get("RGPU_SERVER")),
        "steps": a.steps,
        "step_ms_median": 1000 * statistics.median(steady),
        "step_ms_min": 1000 * min(steady),
        # This process's CPU time per step (all its threads): near step_ms_median, the client is
        # what bounds the step, not the GPU.
        "client_cpu_ms_median": 1000 * statistics.median(cpu_times[a.warmup:] or cpu_times),
        "fused_adamw": fused,
        "compile": a.compile,
        "first_step_s": first_step_s,
        "first_step_marks_s": {**MARKS, "first_step": first_step_s},
        "losses": losses,
        "round_trips_per_step": (snap_after["round_trips"] - snap_before["round_trips"]) / measured
        if snap_before is not None and snap_after is not None and measured > 0 else None,
        "waits_per_step": waits_between(snap_before, snap_after, measured),
    }
    if a.device == "rgpu" and snap_before is not None and measured > 0:
        # The rgpu device's own counters: one-way calls (ops, allocations, frees) and bytes per
        # step, and ops whose output metadata still came from the meta device (0 once warm).
        for k in ("one_way", "bytes_sent", "meta_misses"):
            res[k + "_per_step"] = (snap_after[k] - snap_before[k]) / measured
    json.dump(res, open(a.out, "w"), indent=1)
    print(f"{a.model}: median step {res['step_ms_median']:.2f} ms (client cpu {res['client_cpu_ms_median']:.2f} ms), first step after {first_step_s:.2f} s, "
          f"round trips/step {res['round_trips_per_step']}"
          + (f", one-way calls/step {res['one_way_per_step']:.0f}" if "one_way_per_step" in res else "")
          + f", loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    if res["waits_per_step"]:
        print(f"{a.model}: calls that waited, per step: {res['waits_per_step']}")


if __name__ == "__main__":
    main()
