// cuStreamCreate*, cuEventCreate, cuStreamWaitEvent and cuEventRecordWithFlags: one-way calls
// (the stream or event handle is minted by the client), so flags the driver refuses at once are
// refused here before anything is sent (client/driver/argument_checks.h); the rest is forwarded
// as generated (rgpu_fwd_*). On the H200 the stream-create and wait flags are checked even with
// no current context; an event is created only in one (INVALID_CONTEXT first).
#include <cuda.h>

#include "client/call.h"
#include "client/driver/argument_checks.h"
#include "gen/client_forward.gen.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"

namespace {

namespace checks = rgpu::client::checks;

// A stream of one server waiting for an event of another (RGPU_SERVER=a,b): neither server can
// see the other's event, so the wait happens here, on the host: once the event has completed,
// whatever the program queues on the stream after this call runs after the event's work, as the
// driver promises. Stricter than the driver (this thread blocks until then), never looser.
bool waits_across_servers(CUstream stream, CUevent event, CUresult* rc) {
  if (!rgpu::client::several_servers() || !event) return false;
  int stream_server = rgpu::client::handle_server(rgpu::client::handle_id(stream));
  if (stream_server < 0) stream_server = rgpu::client::current_server();
  if (rgpu::client::handle_server(rgpu::client::handle_id(event)) == stream_server) return false;
  rgpu::client::trace_call("cuStreamWaitEvent across servers");
  *rc = cuEventSynchronize(event);
  return true;
}

bool has_context() {
  checks::DeviceLimits unused;
  return checks::current_device_limits(&unused);
}

}  // namespace

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  if (phStream && checks::stream_create_flags(Flags))
    return checks::refused(rgpu::op::cuStreamCreate, checks::stream_create_flags(Flags));
  return rgpu_fwd_cuStreamCreate(phStream, Flags);
}

RGPU_EXPORT CUresult CUDAAPI cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags, int priority) {
  if (phStream && checks::stream_create_flags(flags))
    return checks::refused(rgpu::op::cuStreamCreateWithPriority, checks::stream_create_flags(flags));
  return rgpu_fwd_cuStreamCreateWithPriority(phStream, flags, priority);
}

RGPU_EXPORT CUresult CUDAAPI cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  if (phEvent && checks::event_create_flags(Flags) && has_context())
    return checks::refused(rgpu::op::cuEventCreate, checks::event_create_flags(Flags));
  return rgpu_fwd_cuEventCreate(phEvent, Flags);
}

RGPU_EXPORT CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  if (hEvent && checks::stream_wait_event_flags(Flags))
    return checks::refused(rgpu::op::cuStreamWaitEvent, checks::stream_wait_event_flags(Flags));
  if (CUresult rc; waits_across_servers(hStream, hEvent, &rc)) return rc;
  return rgpu_fwd_cuStreamWaitEvent(hStream, hEvent, Flags);
}

RGPU_EXPORT CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  if (hEvent && checks::stream_wait_event_flags(Flags))
    return checks::refused(rgpu::op::cuStreamWaitEvent_ptsz, checks::stream_wait_event_flags(Flags));
  if (CUresult rc; waits_across_servers(hStream, hEvent, &rc)) return rc;
  return rgpu_fwd_cuStreamWaitEvent_ptsz(hStream, hEvent, Flags);
}

RGPU_EXPORT CUresult CUDAAPI cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags) {
  if (hEvent && checks::event_record_flags(flags) && has_context())
    return checks::refused(rgpu::op::cuEventRecordWithFlags, checks::event_record_flags(flags));
  return rgpu_fwd_cuEventRecordWithFlags(hEvent, hStream, flags);
}

RGPU_EXPORT CUresult CUDAAPI cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags) {
  if (hEvent && checks::event_record_flags(flags) && has_context())
    return checks::refused(rgpu::op::cuEventRecordWithFlags_ptsz, checks::event_record_flags(flags));
  return rgpu_fwd_cuEventRecordWithFlags_ptsz(hEvent, hStream, flags);
}

}  // extern "C"
