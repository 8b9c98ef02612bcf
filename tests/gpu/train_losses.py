"""A small GPT trained on cuda, deterministically, printing its losses as exact hex floats (one
JSON line): what tests/gpu/reconnect.sh compares between an uncut run through rgpu and runs whose
connection is cut, or whose rgpu-server is restarted, mid-training. Imports torch only.
  python train_losses.py STEPS [PAUSE_FILE] [--times FILE]
    PAUSE_FILE: after step 0, makes PAUSE_FILE.ready and waits until PAUSE_FILE exists;
    --times FILE: each step's wall time in seconds, as a JSON list, into FILE (apart from the
    losses, so that runs of different speed still print the same line)."""
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from parity_programs import GPT  # noqa: E402  (the tied-embedding GPT of the device's parity tests)

args = sys.argv[1:]
times_file = None
if "--times" in args:
    i = args.index("--times")
    times_file = args[i + 1]
    del args[i:i + 2]
steps = int(args[0])
pause = args[1] if len(args) > 1 else None
torch.use_deterministic_algorithms(True)  # with CUBLAS_WORKSPACE_CONFIG (reconnect.sh sets it)
torch.manual_seed(1234)
model = GPT(vocab=512, ctx=64, c=256, heads=8, layers=4).cuda()
opt = model.optimizer()
data = torch.randint(0, 512, (steps, 16, 65), device="cuda")
losses = []
step_s = []
for k in range(steps):
    start = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = model(data[k, :, :-1].contiguous(), data[k, :, 1:].contiguous())
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    losses.append(loss.item().hex())
    step_s.append(time.perf_counter() - start)
    if k == 0 and pause:
        open(pause + ".ready", "w").close()
        deadline = time.time() + 120
        while not os.path.exists(pause) and time.time() < deadline:
            time.sleep(0.02)
print(json.dumps({"losses": losses}))
if times_file:
    with open(times_file, "w") as f:
        json.dump(step_s, f)
