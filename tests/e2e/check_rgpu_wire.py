"""Checks tests/e2e/rgpu_wire.py against the C++ protocol: runs wire_layout_dump (argv[1]), which
prints every constant of protocol/messages.h as the compiler sees it, the frame and reply-prefix
layouts, and the bytes protocol/wire/'s codecs write for the payloads rgpu_wire.py builds; exits 1
naming each difference, and each constant rgpu_wire.py reads from messages.h that the dump lacks
(add it to wire_layout_dump.cpp). The ctest rgpu_wire_layout runs it."""
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rgpu_wire as wire  # noqa: E402


def ours():
    """What rgpu_wire.py says, in the dump's lines."""
    lines = {f"const {name}": str(value) for name, value in wire.CONTROL.items()}
    for name in ("CUDA_SUCCESS", "CUDA_ERROR_INVALID_VALUE", "CUDA_ERROR_NOT_INITIALIZED",
                 "CUDA_ERROR_INVALID_CONTEXT", "CUDA_ERROR_INVALID_HANDLE", "CUDA_ERROR_NOT_SUPPORTED"):
        lines[f"const {name}"] = str(getattr(wire, name))
    h = wire.HEADER
    lines["layout FrameHeader"] = " ".join(str(x) for x in (h.size, 0, 4, 6, 8, 12))
    assert h.format == "<IHHII", h.format  # the offsets above are this format's
    p = wire.REPLY_PREFIX
    assert p.format == "<iHH", p.format
    lines["layout ReplyPrefix"] = f"{p.size} 0 4"
    samples = {
        "module_by_hash": wire.module_by_hash(0x2000, wire.OPS["cuModuleLoadData"], bytes(range(32))),
        "image_load": wire.image_load(0x3000, b"\x7fELF"),
        "symbol_lookup": wire.symbol_lookup(0x3001, 0x3000, "rgpu_vec_add"),
        "param_layout_ask": wire.param_layout_ask(0x3101, 2),
        "alloc_ahead": wire.alloc_ahead(4096, 3),
        "session_control": wire.session_control(3, 1234, 1),
    }
    for name, payload in samples.items():
        lines[f"bytes {name}"] = payload.hex()
    return lines


def main():
    out = subprocess.run([sys.argv[1]], check=True, capture_output=True, text=True).stdout
    theirs = {}
    for line in out.splitlines():
        kind, name, value = line.split(" ", 2)
        theirs[f"{kind} {name}"] = value
    mine = ours()
    bad = []
    for key, value in theirs.items():
        if key not in mine:
            bad.append(f"{key}: the C++ side has {value}, rgpu_wire.py has nothing")
        elif mine[key] != value:
            bad.append(f"{key}: the C++ side has {value}, rgpu_wire.py has {mine[key]}")
    for key in mine.keys() - theirs.keys():
        bad.append(f"{key}: rgpu_wire.py reads it from protocol/messages.h, but wire_layout_dump.cpp does not "
                   "print it (add it there)")
    for line in bad:
        print("rgpu_wire.py disagrees with protocol/:", line)
    print(f"{len(theirs)} values compared, {len(bad)} differences")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
