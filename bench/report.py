#!/usr/bin/env python3
"""Merges the JSONs of tcp_baseline and driver_bench (local and rgpu) into OUT/driver_bench.json
and OUT/driver_bench.md: one table of the numbers side by side, and the ratios the project's
targets are stated in, each with pass/fail. A missing input (no local run with --driver fake) makes
its column empty and the ratios that need it "n/a"; the others still compute.

It also checks that each run measured what its column claims: the rgpu run must have mapped the
shim's libcuda.so.1 (from BUILD/lib), the local run must not have, and the server log must show a
driver_bench session. A failed check is an error: numbers from the wrong driver are worse than none.

Usage: report.py --out DIR [--driver PATH|fake] [--build DIR] [--server-log FILE] JSON...
       (each JSON's "mode" says which column it fills: tcp, local or rgpu)
"""
import argparse
import json
import os
import re
import sys

# (key, what, direction, target): the ratio targets of the driver path.
TARGETS = [
    ("launch_rate_rgpu_over_local", "empty-kernel launch rate, rgpu / local", ">=", 0.8),
    ("small_sync_call_over_tcp_rtt", "small sync call (cuMemGetInfo) rgpu / raw TCP RTT", "<=", 1.5),
    ("htod_over_tcp_bulk", "bulk pageable HtoD rgpu / raw TCP bandwidth", ">=", 0.7),
    ("dtoh_over_tcp_bulk", "bulk pageable DtoH rgpu / raw TCP bandwidth", ">=", 0.7),
]


def load(paths):
    runs = {}
    for p in paths:
        if not os.path.exists(p):
            continue
        with open(p) as f:
            d = json.load(f)
        runs[d.get("mode", os.path.splitext(os.path.basename(p))[0])] = d
    return runs


def ratio(num, den):
    if num is None or den is None or den == 0:
        return None
    return num / den


def compute_ratios(local, rgpu, tcp):
    g = lambda d, k: d.get(k) if d else None
    values = {
        # Rates are inverse times: rgpu rate / local rate = local us / rgpu us.
        "launch_rate_rgpu_over_local": ratio(g(local, "launch_us"), g(rgpu, "launch_us")),
        "small_sync_call_over_tcp_rtt": ratio(g(rgpu, "small_sync_call_us"), g(tcp, "tcp_rtt_us")),
        "htod_over_tcp_bulk": ratio(g(rgpu, "htod_gbps"), g(tcp, "tcp_bulk_gbps")),
        "dtoh_over_tcp_bulk": ratio(g(rgpu, "dtoh_gbps"), g(tcp, "tcp_bulk_gbps")),
    }
    out = {}
    for key, what, op, target in TARGETS:
        v = values[key]
        ok = None if v is None else (v >= target if op == ">=" else v <= target)
        out[key] = {"what": what, "value": v, "op": op, "target": target, "pass": ok}
    return out


def check_provenance(runs, build, server_log):
    """Returns (errors, calls served by the server to driver_bench or None)."""
    errors = []
    shim_dir = os.path.realpath(os.path.join(build, "lib")) if build else None
    under_shim = lambda p: shim_dir and os.path.realpath(p).startswith(shim_dir + os.sep)
    if "rgpu" in runs and shim_dir and not under_shim(runs["rgpu"].get("libcuda", "?")):
        errors.append(f"the rgpu run mapped {runs['rgpu'].get('libcuda')}, not the shim in {shim_dir}")
    if "local" in runs and shim_dir and under_shim(runs["local"].get("libcuda", "?")):
        errors.append(f"the local run mapped the shim {runs['local'].get('libcuda')}, not the real driver")
    calls = None
    if "rgpu" in runs and server_log and os.path.exists(server_log):
        text = open(server_log, errors="replace").read()
        m = re.findall(r"prog=driver_bench\b.*?ended after (\d+) calls", text)
        if m:
            calls = sum(int(x) for x in m)
        elif "prog=driver_bench" not in text:
            errors.append(f"{server_log} shows no driver_bench session: the rgpu run reached another server")
    return errors, calls


def fmt(v, digits=2):
    if v is None:
        return "–"
    if isinstance(v, float) and abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.{digits}f}"


def with_p99(d, key, p99key):
    if not d or d.get(key) is None:
        return "–"
    return f"{fmt(d[key])} (p99 {fmt(d.get(p99key))})"


def markdown(runs, ratios, driver, calls):
    local, rgpu, tcp = runs.get("local"), runs.get("rgpu"), runs.get("tcp")
    g = lambda d, k: d.get(k) if d else None
    m8 = lambda d, k: d["memcpy_8b_us"].get(k) if d and "memcpy_8b_us" in d else None

    def row(name, unit, lv, rv, tv="", lower_is_better=True, lnum=None, rnum=None):
        rel = "n/a"
        if lnum is not None and rnum is not None and lnum and rnum:
            rel = f"{(rnum / lnum if lower_is_better else lnum / rnum):.2f}×"
        return f"| {name} | {unit} | {lv} | {rv} | {tv} | {rel} |"

    quick = any(d.get("quick") for d in runs.values())
    lines = [
        "# Driver-path benchmark",
        "",
        f"- server driver: `{driver}`" + (" (rgpu's fake: the rgpu column is rgpu's own overhead, no GPU)"
                                         if driver == "fake" else ""),
        f"- device: {g(rgpu, 'device') or g(local, 'device') or '?'}; "
        f"mode: {'quick' if quick else 'full'}"
        + (f"; bulk {g(rgpu, 'bulk_bytes') >> 20} MiB pageable" if g(rgpu, "bulk_bytes") else "")
        + (f"; TCP bulk {g(tcp, 'tcp_bulk_bytes') >> 20} MiB" if g(tcp, "tcp_bulk_bytes") else ""),
        f"- libcuda mapped: local `{g(local, 'libcuda') or '–'}`, rgpu `{g(rgpu, 'libcuda') or '–'}`"
        + (f"; the server served {calls} calls to driver_bench" if calls else ""),
        "",
        "| metric | unit | local | rgpu | raw TCP | rgpu cost vs local |",
        "|---|---|---|---|---|---|",
        row("empty kernel, `cuLaunchKernel` back to back", "µs/launch", fmt(g(local, "launch_us")),
            fmt(g(rgpu, "launch_us")), "", True, g(local, "launch_us"), g(rgpu, "launch_us")),
        row("launch + `cuStreamSynchronize`", "µs", with_p99(local, "launch_sync_us", "launch_sync_p99_us"),
            with_p99(rgpu, "launch_sync_us", "launch_sync_p99_us"), "", True, g(local, "launch_sync_us"),
            g(rgpu, "launch_sync_us")),
        row("small sync call `cuMemGetInfo`", "µs",
            with_p99(local, "small_sync_call_us", "small_sync_call_p99_us"),
            with_p99(rgpu, "small_sync_call_us", "small_sync_call_p99_us"),
            with_p99(tcp, "tcp_rtt_us", "tcp_rtt_p99_us") + " RTT 64 B", True,
            g(local, "small_sync_call_us"), g(rgpu, "small_sync_call_us")),
        row("`cuMemcpyHtoD` 8 B", "µs", fmt(m8(local, "htod")), fmt(m8(rgpu, "htod")), "", True,
            m8(local, "htod"), m8(rgpu, "htod")),
        row("`cuMemcpyDtoH` 8 B", "µs", fmt(m8(local, "dtoh")), fmt(m8(rgpu, "dtoh")), "", True,
            m8(local, "dtoh"), m8(rgpu, "dtoh")),
        row("pageable `cuMemcpyHtoD`, best of 3", "GB/s", fmt(g(local, "htod_gbps")), fmt(g(rgpu, "htod_gbps")),
            fmt(g(tcp, "tcp_bulk_gbps")) + " bulk", False, g(local, "htod_gbps"), g(rgpu, "htod_gbps")),
        row("pageable `cuMemcpyDtoH`, best of 3", "GB/s", fmt(g(local, "dtoh_gbps")), fmt(g(rgpu, "dtoh_gbps")),
            fmt(g(tcp, "tcp_bulk_gbps")) + " bulk", False, g(local, "dtoh_gbps"), g(rgpu, "dtoh_gbps")),
        "",
        "\"rgpu cost vs local\": rgpu time / local time (for bandwidths local / rgpu); above 1 is slower.",
        "",
        "| target | measured | target | result |",
        "|---|---|---|---|",
    ]
    for key, r in ratios.items():
        res = "n/a" if r["pass"] is None else ("**pass**" if r["pass"] else "**FAIL**")
        val = "n/a" if r["value"] is None else f"{r['value']:.2f}"
        lines.append(f"| {r['what']} | {val} | {r['op'].replace('>=', '≥').replace('<=', '≤')} {r['target']} | {res} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--driver", default="?")
    ap.add_argument("--build")
    ap.add_argument("--server-log")
    ap.add_argument("inputs", nargs="+")
    a = ap.parse_args()

    runs = load(a.inputs)
    if "rgpu" not in runs or "tcp" not in runs:
        sys.exit(f"report.py: need the tcp and rgpu runs, got {sorted(runs)}")
    errors, calls = check_provenance(runs, a.build, a.server_log)
    for e in errors:
        print(f"report.py: {e}", file=sys.stderr)
    ratios = compute_ratios(runs.get("local"), runs["rgpu"], runs["tcp"])
    merged = {"driver": a.driver, "local": runs.get("local"), "rgpu": runs["rgpu"], "tcp": runs["tcp"],
              "calls_served": calls, "ratios": ratios, "provenance_errors": errors}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "driver_bench.json"), "w") as f:
        json.dump(merged, f, indent=2)
        f.write("\n")
    md = markdown(runs, ratios, a.driver, calls)
    with open(os.path.join(a.out, "driver_bench.md"), "w") as f:
        f.write(md)
    print(md)
    print(f"wrote {os.path.join(a.out, 'driver_bench.json')} and driver_bench.md")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
