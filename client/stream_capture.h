// Stream capture as the client sees it (client/driver/stream_capture.cpp).
#pragma once

#include <cuda.h>

namespace rgpu::client {

// True when the stream is being captured into a graph (asks the server only while some capture
// is open in this process).
bool stream_is_capturing(CUstream stream);

// Copies between the device and this process's memory cannot be captured: the graph would copy
// at launch time on the server, which cannot reach this memory. Returns CUDA_SUCCESS, or
// CUDA_ERROR_NOT_SUPPORTED after one log line naming the call and the reason.
CUresult refuse_host_copy_in_capture(const char* call, CUstream stream);

}  // namespace rgpu::client
