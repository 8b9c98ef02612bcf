"""CPU time per generated token (KV cache) of the client process and of the opserver's session
process, for the tree in TREE with the build in RGPU_BUILD_DIR: what each side spends per token,
less sensitive to the machine's other load than tokens/s."""
import json, os, resource, subprocess, sys, time
T = os.environ["TREE"]
sys.path.insert(0, T + "/bench")
import torch_gen_bench as b
import torch
srv = b.start_opserver()
import rgpu
m = b.model_on("rgpu")
prompt = torch.randint(0, 65, (1, 8), generator=torch.Generator().manual_seed(1))
b.generate(m, prompt.to("rgpu"), 20, True)
kid = int(subprocess.check_output(["pgrep", "-P", str(srv.pid)]).split()[0])
tck = os.sysconf("SC_CLK_TCK")
def server_cpu():
    f = open(f"/proc/{kid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tck
def client_cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
N = 200
out = []
for _ in range(runs):
    c0, s0, w0 = client_cpu(), server_cpu(), time.perf_counter()
    b.generate(m, prompt.to("rgpu"), N, True)
    time.sleep(0.05)
    c1, s1, w1 = client_cpu(), server_cpu(), time.perf_counter()
    out.append({"client_ms_per_token": (c1 - c0) / N * 1e3, "server_ms_per_token": (s1 - s0) / N * 1e3,
                "wall_ms_per_token": (w1 - w0 - 0.05) / N * 1e3})
print(json.dumps(out))
srv.terminate()
