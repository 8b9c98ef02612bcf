"""torch.rgpu: the device module of the rgpu backend (what torch.cuda is to CUDA), with torch.cuda's
names and meanings: availability, devices, memory, properties, streams and events, generators.

What waits for the server (one round trip) and what does not:
- never: memory_allocated, max_memory_allocated (the client counts its storages), empty_cache,
  reset_peak_memory_stats, set_rng_state, manual_seed (one-way), current_stream, Stream, Event;
- once per device and process: get_device_properties, get_device_name, get_device_capability
  (the answers never change);
- each call: memory_reserved, max_memory_reserved, memory_stats (on a cuda server, whose cache
  only it knows; a cpu server has no cache, so these are the client's counts and do not wait),
  mem_get_info, get_rng_state, seed, initial_seed, synchronize, Event.elapsed_time.
"""
import contextlib
import os
import warnings

import torch


def _index(device=None):
    """The device index of device (None, int, str or torch.device) on rgpu; None means current."""
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "rgpu":
        raise ValueError(f"rgpu: expected an rgpu device, got {device}")
    return current_device() if device.index is None else device.index


def is_available():
    """True when an rgpu-opserver answers (connecting to it if not connected yet); False, without
    raising, when none can be reached (RGPU_OPSERVER, RGPU_TOKEN)."""
    if torch.ops.rgpu.is_connected():
        return True
    try:
        torch.ops.rgpu.connect(False)  # one short try: a missing server is answered at once
    except RuntimeError:
        return False
    return True


def is_initialized():
    """True once this process is connected to rgpu-opserver (torch.cuda: once CUDA is initialised)."""
    return torch.ops.rgpu.is_connected()


def init():
    """Connects now rather than at the first use; raises, saying why, when the server cannot be reached."""
    torch.ops.rgpu.connect()


def device_count():
    """The number of rgpu devices: what the opserver presents (connects on first use). 0, with a
    warning saying why, when no opserver can be reached (as torch.cuda.device_count() is 0
    without a driver); the first rgpu tensor then raises the same error."""
    try:
        if not torch.ops.rgpu.is_connected():
            torch.ops.rgpu.connect(False)  # one short try, as is_available
        return torch.ops.rgpu.device_count()
    except RuntimeError as e:
        warnings.warn(f"rgpu: no devices: {e}", stacklevel=2)
        return 0


def current_device():
    """The index of this thread's current rgpu device (0 until set_device or a device context)."""
    return torch.ops.rgpu.current_device()


def set_device(device):
    """Makes device this thread's current rgpu device, like torch.cuda.set_device."""
    torch.ops.rgpu.set_device(_index(device))



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


def synchronize(device=None):
    """Waits until the server has run every op sent so far; raises the first error among them."""
    torch.ops.rgpu.synchronize()


# --- memory -----------------------------------------------------------------------------------

def memory_allocated(device=None):
    """Bytes of the rgpu tensors' storages alive in this process on device (no wait)."""
    return torch.ops.rgpu.memory_allocated(_index(device))[0]


def max_memory_allocated(device=None):
    """The peak of memory_allocated since the start or reset_peak_memory_stats (no wait)."""
    return torch.ops.rgpu.memory_allocated(_index(device))[1]


def memory_stats(device=None):
    """torch.cuda.memory_stats's dictionary ("allocated_bytes.all.current", ...): allocations as
    this client counts them; reserved bytes and segments from the server's caching allocator
    (one wait on a cuda server)."""
    return torch.accelerator.memory_stats(_index(device))


def memory_reserved(device=None):
    """Bytes the server's caching allocator holds for this client on device."""
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device=None):
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device=None):
    """Resets the peaks (allocated here, reserved on the server) to the current values."""
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_max_memory_allocated(device=None):
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device=None):
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def empty_cache():
    """Returns the server's cached, unused device memory to the device (torch.cuda.empty_cache on
    the server; nothing to do on a cpu server). One-way."""
    torch.accelerator.empty_cache()


def mem_get_info(device=None):
    """(free, total) bytes of the device's memory, as cudaMemGetInfo tells the server; a cpu server
    tells its host's available and total memory."""
    return torch.accelerator.get_memory_info(_index(device))


# --- properties -------------------------------------------------------------------------------

class _DeviceProperties:
    """What torch.cuda.get_device_properties returns, for an rgpu device (the server's GPU)."""

    _FIELDS = ("major", "minor", "multi_processor_count", "warp_size", "max_threads_per_multi_processor",
               "L2_cache_size", "regs_per_multiprocessor", "is_integrated", "is_multi_gpu_board")

    def __init__(self, names, values):
        self.name, self.uuid = names
        self.total_memory = values[0]
        for field, value in zip(self._FIELDS, values[1:]):
            setattr(self, field, value)

    def __repr__(self):
        return (f"_RgpuDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // (1024 * 1024)}MB, "
                f"multi_processor_count={self.multi_processor_count}, uuid={self.uuid or None})")


_properties = {}


def get_device_properties(device=None):
    """The server device's name, total_memory, major, minor, multi_processor_count, warp_size, ...
    (asked once per device)."""
    index = _index(device)
    if index not in _properties:
        _properties[index] = _DeviceProperties(*torch.ops.rgpu.device_properties(index))
    return _properties[index]


def get_device_name(device=None):
    return get_device_properties(device).name


def get_device_capability(device=None):
    """(major, minor) compute capability of the server's GPU; (0, 0) on a cpu server."""
    p = get_device_properties(device)
    return p.major, p.minor


# --- streams and events -----------------------------------------------------------------------
# Each device has one stream: the server runs a client's calls in the order they were sent.

class Stream(torch.Stream):
    """An rgpu stream (torch.cuda.Stream). All streams of a device are its one in-order stream, so
    work on two streams never overlaps and waiting between them costs nothing."""

    def __new__(cls, device=None, priority=0, **kwargs):
        return super().__new__(cls, device=torch.device("rgpu", _index(device)), priority=priority, **kwargs)


class _EventType(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, torch.Event) and obj.device.type == "rgpu"


class Event(metaclass=_EventType):
    """An rgpu event (torch.cuda.Event): a torch.Event on rgpu (torch's event methods take no
    subclass). With enable_timing=True, record() also records it on the server, where the work
    runs, and elapsed_time() returns the server's milliseconds between two such events."""

    def __new__(cls, enable_timing=False, blocking=False, interprocess=False):
        if interprocess:
            raise RuntimeError("rgpu: interprocess events are not supported")
        return torch.Event(device="rgpu", enable_timing=enable_timing, blocking=blocking)


def current_stream(device=None):
    return torch.accelerator.current_stream(_index(device))


def default_stream(device=None):
    return torch.accelerator.current_stream(_index(device))


def set_stream(stream):
    if stream is not None:
        torch.accelerator.set_stream(stream)


@contextlib.contextmanager
def stream(stream):
    """Context manager that makes stream the current one (torch.cuda.stream); None does nothing."""
    if stream is None:
        yield
        return
    prev = torch.accelerator.current_stream(stream.device_index)
    torch.accelerator.set_stream(stream)
    try:
        yield
    finally:
        torch.accelerator.set_stream(prev)


class StreamContext:
    """torch.cuda.StreamContext: the class behind stream()."""

    def __init__(self, stream):
        self.stream, self.prev = stream, None

    def __enter__(self):
        if self.stream is not None:
            self.prev = torch.accelerator.current_stream(self.stream.device_index)
            torch.accelerator.set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.prev is not None:
            torch.accelerator.set_stream(self.prev)
        return False


# --- random numbers: the server's generators --------------------------------------------------

def manual_seed(seed):
    """Seeds the current device's generator on the server (sent at connect if not connected yet)."""
    torch.ops.rgpu.manual_seed_device(current_device(), int(seed))


def manual_seed_all(seed):
    """Seeds every device's generator on the server (torch.manual_seed calls this)."""
    torch.ops.rgpu.manual_seed(int(seed))


def seed():
    """Seeds the current device's generator from a random source."""
    torch.ops.rgpu.seed(current_device())


def seed_all():
    for index in range(device_count()):
        torch.ops.rgpu.seed(index)


def initial_seed():
    """The current device's seed."""
    return torch.ops.rgpu.initial_seed(current_device())


def get_rng_state(device="rgpu"):
    """The server generator's state (a cpu torch.ByteTensor), for set_rng_state."""
    return torch.ops.rgpu.get_rng_state(_index(device))


def set_rng_state(new_state, device="rgpu"):
    torch.ops.rgpu.set_rng_state(_index(device), new_state)


def get_rng_state_all():
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states):
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


# --- rgpu's own ---------------------------------------------------------------------------------

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
    waited: "read" (.item(), .cpu()), "synchronize", or the name of an op that waited;
    'meta_misses_by_op' splits 'meta_misses' by operator; 'shape_rules' counts calls whose output
    metadata a shape rule gave (csrc/aten/shape_rules.h) with no meta run, 'shape_rules_checked'
    those also run on the meta device to check the rule, 'shape_rule_mismatches' those where the
    two disagreed (the meta device's answer was used); 'resumes' counts the broken connections to
    the opserver this session came back from, 'duplicates_dropped' the frames that came twice
    across them (the channel drops them: every call runs once)."""
    (waits, posts, sent, hits, misses, uncacheable, rules, checked, mismatches, resumes,
     duplicates) = torch.ops.rgpu.stats()
    why, count = torch.ops.rgpu.waits_by_reason()
    ops, missed = torch.ops.rgpu.meta_misses_by_op()
    return {"waits": waits, "posts": posts, "bytes_sent": sent, "meta_hits": hits, "meta_misses": misses,
            "meta_uncacheable": uncacheable, "waits_by_reason": dict(zip(why, count)),
            "meta_misses_by_op": dict(zip(ops, missed)), "shape_rules": rules,
            "shape_rules_checked": checked, "shape_rule_mismatches": mismatches, "resumes": resumes,
            "duplicates_dropped": duplicates}


def get_amp_supported_dtype():
    return [torch.float16, torch.bfloat16]
