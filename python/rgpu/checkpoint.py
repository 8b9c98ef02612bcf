"""Checkpoints without a round trip per tensor (issue 14, item 8).

torch.save copies each storage to the cpu on its own (storage.cpu() in torch.serialization._save),
and `{k: v.cpu() for k, v in model.state_dict().items()}` each tensor: on rgpu each copy waited for
the server once (84 waits to save a 4-layer model). Here rgpu tells its backend which storages are
about to be read (runtime/readahead.h); the first read of one fetches it with the others in one
round trip (kTorchReadMany) and the reads that follow are served from those host copies, which
stay valid only while nothing is sent that could change device bytes.

Two places announce:
- torch.save: the location tag torch asks of every storage while it pickles (before it copies any)
  goes through a tagger registered here first; it announces rgpu storages and lets torch's own
  tagger name them, so checkpoints are the same files as before.
- Module.state_dict: the outermost call announces the rgpu tensors of the dict it returns.
"""
import functools
import threading

import torch

_depth = threading.local()


def _tag(storage):
    """Announces an rgpu storage to the read-ahead; never names a location itself."""
    if storage.device.type == "rgpu":
        if isinstance(storage, torch.storage.TypedStorage):
            storage = storage._untyped_storage
        torch.ops.rgpu.announce_storage(storage)
    return None


def _deserialize(obj, location):
    return None  # torch's privateuse1 entry restores rgpu storages


def _announcing_state_dict(state_dict):
    @functools.wraps(state_dict)
    def wrapper(self, *args, **kwargs):
        depth = getattr(_depth, "n", 0)
        _depth.n = depth + 1
        try:
            result = state_dict(self, *args, **kwargs)
        finally:
            _depth.n = depth
        if depth == 0 and isinstance(result, dict):
            tensors = [v for v in result.values() if isinstance(v, torch.Tensor) and v.device.type == "rgpu"]
            if tensors:
                torch.ops.rgpu.announce_reads(tensors)
        return result

    return wrapper


def register():
    """At import (rgpu._register)."""
    torch.serialization.register_package(9, _tag, _deserialize)
    torch.nn.Module.state_dict = _announcing_state_dict(torch.nn.Module.state_dict)
