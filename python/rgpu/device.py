"""torch.rgpu: the device module of the rgpu backend (what torch.cuda is to CUDA).

torch asks it for the device count, for seeding (torch.manual_seed seeds the server's generator
through manual_seed_all) and for synchronisation. rgpu has one device, rgpu:0.
"""
import os

import torch


def is_available():
    return True


def is_initialized():
    return True


def device_count():
    return 1


def current_device():
    return 0


def set_device(device):
    index = torch.device(device).index if not isinstance(device, int) else device
    if index not in (None, 0):
        raise RuntimeError(f"rgpu has one device, rgpu:0; got {device}")


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
    """Context manager selecting an rgpu device (there is one: rgpu:0), like torch.cuda.device."""

    def __init__(self, device):
        if device is not None:
            set_device(device)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
