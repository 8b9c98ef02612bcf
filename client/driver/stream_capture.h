// Stream capture as the client sees it (client/driver/stream_capture.cpp).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace rgpu::client {

// True when the stream is being captured into a graph (asks the server only while some capture
// is open in this process).
bool stream_is_capturing(CUstream stream);

// An async copy between device memory and this process's memory, [host, host + n), issued on a
// stream that may be capturing. The graph copies at launch time on the server, which cannot reach
// this memory, so a captured copy becomes a device-to-device copy: with mapped host memory
// (client/mapped_memory.h) against the server's copy; otherwise against a device staging buffer
// allocated here, and the host side becomes a transfer of the captured graph, moved around each
// cuGraphLaunch of its instances as for a memcpy node's host side (client/driver/graph.cpp).
// *captured says whether the copy was captured (then done, or failed with the result); when false
// the caller issues the copy as usual. `ptsz`: the call was a per-thread-stream (_ptsz) form.
CUresult capture_host_copy(const char* call, CUstream stream, bool ptsz, CUdeviceptr device, void* host, size_t n,
                           bool to_device, bool* captured);

// Defined in client/driver/graph.cpp: graph `graph` (an id) moves `transfer` (one side host
// memory, the other a staging buffer) around each launch of its instances: before the launch
// when to_device, else after it. `node` is the node that reads or writes the staging buffer (0 if
// unknown).
void note_graph_transfer(uint64_t graph, uint64_t node, bool to_device, const CUDA_MEMCPY3D& transfer);

}  // namespace rgpu::client
