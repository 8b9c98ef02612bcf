"""torch.rgpu: the device module of the rgpu backend (what torch.cuda is to CUDA).

torch asks it for the device count, for seeding (torch.manual_seed seeds the server's generator
through manual_seed_all) and for synchronisation. The devices are those the opserver presents
(rgpu:0 .. rgpu:N-1: the GPUs of its host, or `--devices N` on a CPU server); their count is
asked once, at connect.
"""
import os
import warnings

import torch


def is_available():
    return True


def is_initialized():
    return True


def device_count():
    """The number of rgpu devices: what the opserver presents (connects on first use). 0, with a
    warning saying why, when no opserver can be reached (as torch.cuda.device_count() is 0
    without a driver); the first rgpu tensor then raises the same error."""
    try:
        return torch.ops.rgpu.device_count()
    except RuntimeError as e:
        warnings.warn(f"rgpu: no devices: {e}", stacklevel=2)
        return 0


def current_device():
    """The index of this thread's current rgpu device (0 until set_device or a device context)."""
    return torch.ops.rgpu.current_device()


def _index(device):
    """The device index of an int, "rgpu:1", torch.device or None (the current device)."""
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "rgpu":
        raise ValueError(f"rgpu: expected an rgpu device, got {device}")
    return current_device() if device.index is None else device.index


def set_device(device):
    """Makes device this thread's current rgpu device, like torch.cuda.set_device."""
    torch.ops.rgpu.set_device(_index(device))


def synchronize(device=None):
    """Waits until the server has run every op sent so far; raises the first error among them."""
    torch.ops.rgpu.synchronize()


def manual_seed(seed):
    """Seeds the server's random generator (sent at connect if not connected yet)."""
    torch.ops.rgpu.manual_seed(int(seed))


manual_seed_all = manual_seed


_PID = os.getpid()


def _is_in_bad_fork():
    """True in a process forked after rgpu was imported: the connection belongs to the parent."""
    return os.getpid() != _PID


def server_info():
    """Which server the device is, e.g. 'rgpu-opserver at 127.0.0.1:9720, torch 2.11.0 on cuda'."""
    return torch.ops.rgpu.server_info()


def stats():
    """Counters for benchmarks and tests: since the connection opened, 'waits' (calls that waited
    for the server: blocking round trips), 'posts' (one-way calls: ops, allocations, frees,
    writes) and 'bytes_sent'; since the process started, 'meta_hits', 'meta_misses' and
    'meta_uncacheable' (ops whose output metadata came from the cache, from a run on the meta
    device, or from the meta device without caching); 'waits_by_reason' splits 'waits' by what
    waited: "read" (.item(), .cpu()), "synchronize", or the name of an op that waited."""
    waits, posts, sent, hits, misses, uncacheable = torch.ops.rgpu.stats()
    why, count = torch.ops.rgpu.waits_by_reason()
    return {"waits": waits, "posts": posts, "bytes_sent": sent, "meta_hits": hits, "meta_misses": misses,
            "meta_uncacheable": uncacheable, "waits_by_reason": dict(zip(why, count))}


def get_amp_supported_dtype():
    return [torch.float16, torch.bfloat16]


class device:
    """Context manager that makes device the current rgpu device inside it and restores the
    previous one on exit, like torch.cuda.device (None: changes nothing)."""

    def __init__(self, device):
        self.idx = None if device is None else _index(device)
        self.prev_idx = -1

    def __enter__(self):
        if self.idx is not None:
            self.prev_idx = torch.ops.rgpu.exchange_device(self.idx)
        return self

    def __exit__(self, *exc):
        if self.idx is not None:
            torch.ops.rgpu.set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the device of tensor x current (no change for a non-rgpu one)."""

    def __init__(self, obj):
        super().__init__(obj.get_device() if obj.device.type == "rgpu" else None)
