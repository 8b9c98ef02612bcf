// The rgpu driver-path wire protocol: the commented spec.
//
// Transport: one TCP connection per client process carrying frames, in clear or inside TLS 1.3.
// A TLS connection (RGPU_SERVER=tls://...) starts with a clear preamble (TlsPreamble below) that
// says which process is to terminate it, then the TLS handshake; every frame is inside TLS.
// Every frame is a fixed 16-byte header followed by `length` payload bytes:
//
//   offset size field
//   0      4    length      payload bytes after this header; at most kMaxPayload
//   4      2    op          what the frame asks for (Op below, or a CUDA entry point's id from
//                           gen/ops.gen.h); a reply carries the op of its request
//   6      2    flags       FrameFlags
//   8      4    request_id  chosen by the client; a reply carries its request's id
//   12     4    thread_id   the client thread that made the call; calls with one thread id run
//                           in order on one server thread, calls with different ids may run
//                           concurrently (a synchronize on one thread never stalls another)
//
// All integers are little-endian. Payloads are encoded with common/wire.h. The payloads of the
// CUDA entry points the generator marshals by rule are gen/'s; every hand-written payload (the
// `custom` calls of codegen/annotations.txt, and the control ops below whose layouts say so) has
// one codec in protocol/wire/, used by both ends, whose header is the layout's spec:
//   graph.h      graph nodes, node parameters, dependency lists, node arrays, exec update
//   capture.h    stream capture info, capture to a graph, capture dependencies
//   launch.h     kernel launches and their packed arguments (LaunchArgs), parameter info
//   copy.h       host <-> device copies, pitched 2D/3D copies, kOpAsyncData
//   module.h     module and library loads, kOpModuleByHash, symbol lookups and names; link.h cuLinkComplete
//   mapped.h     mapped host memory and managed memory (kOpMapped*, kOpManagedAlloc)
//   occupancy.h  occupancy queries, kOpClusterOccupancyTable
//   stream.h     host callbacks, stream attributes
//   control.h    kOpAllocAhead, kOpAllocMany, kOpCallback frames, kOpSessions, kOpSessionControl
//   nccl.h       the NCCL API (ops from kFirstNcclOp)
//   dark_api.h   kOpToolsContextObject, kOpModuleFunctions, kOpClusterTopology, kOpExportTableInfo
//   memory.h     VMM, memory pools, pointer attributes
//   texture.h    texture and surface objects; tensor_map.h tensor maps
//
// Connection life:
//   0. TLS connections only: the TlsPreamble (below), then the TLS 1.3 handshake (protocol/tls.h);
//      everything after is inside TLS, and the handshake's proofs are bound to it.
//   1. Handshake (protocol/handshake.h): Hello → Challenge → Auth → Welcome | Refused.
//   2. Calls. A request whose flags lack kNoReply gets exactly one reply frame (kReply set),
//      whose payload starts with a ReplyPrefix. A request with kNoReply gets no reply; if it
//      fails on the server, its error is kept and handed to the next reply on the same thread
//      (ReplyPrefix::deferred_*), so no error is ever dropped.
//   2a. Calls and everything else travel in the channel (below, "The channel"): numbered,
//      acknowledged, resent after a broken connection is resumed (kOpResume), so each frame
//      arrives exactly once and in order however often the network breaks.
//   3. Either side may close. A malformed frame (length over the limit, a payload that does not
//      decode) makes the server log why and close this connection only. An op the server has
//      no handler for is not malformed (a newer client may know ops this server does not): the
//      server logs it and answers CUDA_ERROR_NOT_SUPPORTED (deferred, for a one-way call, to the
//      next reply on its thread) and the connection stays open (tests/e2e/test_hostile.py,
//      test_unknown_op_is_answered_not_supported_and_the_connection_stays).
//
// Op ids are never reused: retired ones stay in place, renamed obsolete_*. Control ops live
// below kFirstCudaOp; CUDA entry points are numbered from kFirstCudaOp in gen/ops.gen.h, from
// the append-only registry codegen/op_ids.txt.
#pragma once

#include <cstdint>

namespace rgpu::proto {

inline constexpr uint32_t kMagic = 0x55504752;  // "RGPU" on the wire
inline constexpr uint16_t kProtocolVersion = 1;
inline constexpr uint32_t kHeaderSize = 16;
// Largest payload a peer may send. Bulk copies are split into frames of RGPU_BULK_CHUNK bytes
// (default 1 MiB: measured on the H200, 1-2 MiB frames pipeline best; at most 32 MiB).
inline constexpr uint32_t kMaxPayload = 64u << 20;
// Largest handshake message; anything bigger before authentication is hostile.
inline constexpr uint32_t kMaxHandshakePayload = 4096;

// The clear preamble of a TLS connection, sent by the client before its TLS ClientHello (in the
// same packet: no round trip). A session's TLS state lives in the process that terminated it and
// cannot move, so the listener must know before TLS begins which process is to run the handshake:
// a new session's spare process, or the live session process a resuming client comes back to
// (protocol/session_dir.h). The session id is not a secret (the resume proof inside TLS is what
// authenticates a resume); seeing it tells an observer only that a connection resumes some session.
//   offset size field
//   0      4    magic     kTlsPreambleMagic ("RGPT"; as a frame's length it would be over
//                         kMaxPayload, so a server without TLS tells it from a clear Hello)
//   4      1    kind      kTlsNew or kTlsResume
//   5      3    reserved  zero
//   8      16   session   the session to resume (zero for kTlsNew)
// A server that cannot serve the connection before TLS (too many sessions, a clear-text server)
// answers with a clear kOpRefused frame in place of the TLS ServerHello; a TLS client whose
// handshake fails reads it and reports its reason, marked as unauthenticated.
inline constexpr uint32_t kTlsPreambleMagic = 0x54504752;  // "RGPT" on the wire
inline constexpr uint32_t kTlsPreambleSize = 24;
inline constexpr uint8_t kTlsNew = 0;
inline constexpr uint8_t kTlsResume = 1;

struct FrameHeader {
  uint32_t length;
  uint16_t op;
  uint16_t flags;
  uint32_t request_id;
  uint32_t thread_id;
};
static_assert(sizeof(FrameHeader) == kHeaderSize);

enum FrameFlags : uint16_t {
  kReply = 1 << 0,    // this frame answers request_id
  kNoReply = 1 << 1,  // a request that wants no answer (a one-way call)
};

// Capability bits exchanged in Hello and Challenge; the session uses the intersection.
enum Capability : uint64_t {
  kCapDeferredErrors = 1 << 0,
  kCapClientHandles = 1 << 1,
  kCapBulkSink = 1 << 2,
  // The server sends its device snapshot (the reply to kOpSnapshot, request id 0) right behind
  // Welcome, unasked: the client's first call needs it, and asking would cost a round trip. Asked
  // for by the CUDA shim's connection, offered by rgpu-server (not part of kOurCapabilities).
  kCapPushedSnapshot = 1 << 3,
  // After the handshake (and the pushed snapshot) both directions are channel frames
  // (protocol/channel.h, "The channel" below): numbered, acknowledged, resumable. Offered by the
  // endpoints that speak it (rgpu-server and the CUDA shim's connection today); without it the
  // frames are plain, and a broken connection ends the session.
  kCapChannel = 1 << 4,
};
inline constexpr uint64_t kOurCapabilities = kCapDeferredErrors | kCapClientHandles | kCapBulkSink;

// Control ops. Payload layouts are given as field lists in encoding order.
enum Op : uint16_t {
  kOpInvalid = 0,
  // Handshake (see handshake.h for the fields).
  kOpHello = 1,
  kOpChallenge = 2,
  kOpAuth = 3,
  kOpWelcome = 4,
  kOpRefused = 5,  // str reason; the server closes after sending it
  // Request: nothing. Reply: the device snapshot (protocol/snapshot.h):
  // everything about the devices that never changes, asked once at connect.
  kOpSnapshot = 16,
  // Request: nothing, no reply wanted; the server stops this session's work and closes.
  kOpGoodbye = 17,
  // Host callbacks (cuLaunchHostFunc, cuStreamAddCallback): the function runs in the client
  // process, in stream order. The client sends the call (one-way) with a callback id it chose;
  // the server queues a host function on the real stream that, when the stream reaches it, sends
  //   server -> client: op kOpCallback, flags 0, request_id 0, thread_id 0;
  //                     u64 callback id, i32 stream status (CUresult), u32 run
  // and then holds the stream until the client answers
  //   client -> server: op kOpCallbackDone, flags kNoReply; u64 callback id
  // once the function has returned, so work queued behind the callback starts after it, as on
  // the real driver. kOpCallback is the only frame a server sends that is not a reply; a client
  // reads it whether or not any thread is waiting for a reply (client/connection.h). run = 0
  // means the server could not queue the callback (the call's error is deferred as usual): the
  // client forgets the id, runs nothing and answers nothing. The server
  // handles kOpCallbackDone on its reading thread (not in a client thread's call order); an id
  // it is not waiting for is ignored with a log line.
  kOpCallback = 18,      // codec (and kOpCallbackDone's): protocol/wire/control.h
  kOpCallbackDone = 19,
  // Module images by content address (docs/design.md §3). Request: u64 module or library id
  // (client-minted), u16 load op (cuModuleLoadData or cuLibraryLoadData from gen/ops.gen.h: what
  // the id names), 32 bytes SHA-256 of the image. Reply: CUresult: CUDA_SUCCESS when the server had
  // the image in its persistent cache (server/module_cache.h) and loaded it under the id, exactly
  // as the load op with the bytes would have; CUDA_ERROR_NOT_FOUND when it has no such image (or
  // its cache is off), and the client then sends the bytes with the load op; any other error is the
  // load's own (CUDA_ERROR_INVALID_VALUE for a load op other than those two). A server older than
  // this op answers CUDA_ERROR_NOT_SUPPORTED, which the client treats as NOT_FOUND. The server adds
  // images that load successfully through the load ops to its cache.
  kOpModuleByHash = 20,  // codec: protocol/wire/module.h
  // Export-table slots answered by the server's driver (client/dark_api/README.md has the
  // signatures, server/handlers/dark_api.cpp the driver side). Driver-private objects never
  // cross the wire.
  // TOOLS_CONTEXT slots 51 and 39, asked together once per (context, stream) (the client caches
  // the answer). Request: u64 context (client handle; 0: the calling thread's current context),
  // u64 stream (client handle; 0 NULL, 1 legacy, 2 per-thread; absent means 0).
  // Reply: CUresult of slot 51 (ctx, stream, &object); when that succeeded, i32 CUresult of slot
  // 39 (ctx, object, &value) and u64 value (the 8 bytes slot 39 writes).
  kOpToolsContextObject = 21,  // codec: protocol/wire/dark_api.h
  // TOOLS_MODULE slot 7: the names of a module's functions, as the driver walks them.
  // Request: u64 context (client handle; 0: current), u64 module (client handle).
  // Reply: CUresult; on success u32 n, then n × str name, in the driver's order. The client then
  // names each function with cuModuleGetFunction (the driver's walk hands out those very objects).
  kOpModuleFunctions = 22,  // codec: protocol/wire/dark_api.h
  // Mapped host memory (server/mapped_memory.h has the scheme). Page size for the exchanges: 4096.
  // kOpMappedAlloc, request: u64 client address, u64 size, u32 flags (CU_MEMHOSTALLOC_*).
  //   Reply: CUresult, u64 device pointer, u64 server address (equal to the client address when
  //   the server could map its copy there).
  kOpMappedAlloc = 23,  // codec (as for every kOpMapped* and kOpManagedAlloc): protocol/wire/mapped.h
  // kOpMappedFree, request (no reply wanted): u64 client address. For a managed buffer
  // (kOpManagedAlloc) the server frees the allocation with cuMemFree.
  kOpMappedFree = 24,
  // kOpMappedWrite, request (no reply wanted; sent before the call it precedes, with the thread
  // id of that call): u64 client address, u64 offset, then the bytes to the end of the payload.
  kOpMappedWrite = 25,
  // kOpMappedUpdate, server -> client, not a reply (flags 0, request_id 0): u64 client address,
  // u64 offset, then the bytes. Sent before the reply it precedes; the client applies it on its
  // reading thread, after checking that it lies inside a buffer it mapped.
  // One special form, for managed buffers (kOpManagedAlloc): offset 2^64-1 and no bytes says the
  // program freed the buffer (cuMemFree_v2 of its address, which the server saw before running
  // it); the client drops its copy. Sent before the driver frees it, so before any reply that
  // could hand the same address out again.
  kOpMappedUpdate = 26,
  // Device printf: server -> client, not a reply (flags 0, request_id 0): what kernels printed
  // (the driver writes it to the server's stdout at synchronizing calls), as raw bytes. Sent
  // before the reply it precedes; the client writes it to its own stdout.
  kOpDeviceOutput = 27,
  // Async device-to-host data: server -> client, not a reply (flags 0, request_id 0). A client's
  // cuMemcpyDtoHAsync is one-way and carries a delivery id it chose; when the copy has run, the
  // server sends: u64 delivery id, i32 CUresult, then the bytes (none on failure). The client
  // writes them into the buffer it registered under that id, after checking the length; an id
  // it is not waiting for breaks the connection. Sent before any later reply on that thread.
  kOpAsyncData = 28,  // codec: protocol/wire/copy.h
  // An export table rgpu does not know (client/driver/export_table.cpp), for the log line that
  // names it. Request: 16 bytes UUID. Reply: CUresult of the server driver's cuGetExportTable;
  // on success u64 the table's first word (its size in bytes, for tables that start with one).
  kOpExportTableInfo = 29,  // codec: protocol/wire/dark_api.h
  // The server's live sessions (rgpu-smi). Request: nothing. Reply: CUresult, u32 n, then n ×
  // (u32 pid, str identity, str peer, u64 start time in unix seconds, u8 1 for the asking session).
  kOpSessions = 30,  // codec: protocol/wire/control.h
  // The channel (protocol/channel.h; "The channel" below has the framing these live in).
  // kOpChannelOpen: the first channel frame each side sends, right after the handshake
  // (sequence 0): u16 channel version (kChannelVersion), 32 bytes X25519 public key, u32 how many
  // seconds this side keeps a broken session for a resume (the server's grace; a client with no
  // RGPU_RECONNECT redials that long). Both sides then hold the session secret
  //   secret = HMAC-SHA256(token, "rgpu-session-secret" || X25519(own private, peer public) ||
  //                        client public key || server public key || session id)
  // which never crosses the wire; without the token and one private key it cannot be computed.
  kOpChannelOpen = 31,
  // kOpHeartbeat (sequence 0, no payload): flags 0 asks the peer to answer at once (a ping:
  // "are you there", and "acknowledge what you have"); kReply is the answer (a pong). Its
  // ChannelHeader carries the sender's acknowledgement like every channel frame. request_id
  // counts the sender's pings (diagnostics only).
  kOpHeartbeat = 32,
  // Resume, on a new connection, in plain frames (no ChannelHeader) like the handshake, which it
  // replaces: the accepting side tells the two apart by the first frame (kOpHello or kOpResume).
  //   client → kOpResume           16 bytes session id, 32 bytes client nonce
  //   server → kOpResumeChallenge  32 bytes server nonce, 32 bytes server proof, u64 the highest
  //                                sequence number the server has received from the client
  //   client → kOpResumeProof      32 bytes client proof, u64 the highest sequence number the
  //                                client has received from the server
  //   server → kOpResumed          nothing | kOpRefused str reason (then the server closes)
  //   server proof = HMAC-SHA256(secret, "rgpu-resume-server" || session id || client nonce ||
  //                              server nonce || u64 server received)
  //   client proof = HMAC-SHA256(secret, "rgpu-resume-client" || session id || server nonce ||
  //                              client nonce || u64 client received)
  // Fresh nonces on both sides: a recorded resume cannot be replayed, and knowing the session id
  // is not enough. The client checks the server's proof too (it reached the same session). After
  // kOpResumed both directions are channel frames again: each side first resends, with their
  // original sequence numbers, the frames above what the other said it received. A wrong proof
  // is refused and leaves the session as it was (still waiting for its client).
  kOpResume = 33,
  kOpResumeChallenge = 34,
  kOpResumeProof = 35,
  kOpResumed = 36,
  // A word from the server to its client, one-way (server -> client, not a reply: flags 0,
  // request_id 0, thread_id 0): u8 kind, u32 seconds, str text (at most kMaxNoticeText bytes),
  // the sentence the client logs as it is (it names the server). Codec: protocol/drain.h.
  //   kNoticeDraining: the server is shutting down (SIGTERM, SIGINT) and gives this session
  //     `seconds` more to finish: calls are still served, the session ends when the client
  //     leaves. A connection that breaks is not redialled past that time.
  //   kNoticeEnded (seconds 0): the server ends this session now (the drain time ran out); nothing
  //     follows it. The client treats the session as lost, with the text as the reason.
  // The client reads a notice whenever it reads: while it waits for a reply, or, if it was idle
  // when the notice came, at its next read.
  kOpNotice = 37,
  // Suspend, resume or migrate a live session of this server (rgpu-smi suspend|resume|migrate;
  // server/session_control.cpp). Request: u8 action (kSessionSuspend, kSessionResume,
  // kSessionMigrate), u32 the session's pid (as kOpSessions lists it), i32 the GPU to move to
  // (kSessionMigrate; -1 otherwise). Reply: CUresult (CUDA_SUCCESS when done), str what happened
  // or why not, for the user (at most kMaxSessionControlMessage bytes), u8 the session's state
  // after it (a CUprocessState; kSessionStateUnknown when the server cannot tell). The server runs
  // the driver's checkpoint API (cuCheckpointProcess*, driver 570 and newer) on that process: a
  // suspended session's GPU memory is in host memory and its calls wait until it is resumed; a
  // migrated one runs on the other GPU. An action this server does not know is answered
  // CUDA_ERROR_NOT_SUPPORTED with a message, and the connection stays.
  kOpSessionControl = 38,  // codec: protocol/wire/control.h
  // (39 unassigned.)
  // A copy between device memory and a mapped host buffer (kOpMappedAlloc), run on the server
  // against its copy of the buffer so the bytes cross the network once. Request: u16 the driver
  // call the program made (cuMemcpyHtoD_v2, cuMemcpyDtoH_v2, cuMemcpyHtoDAsync_v2,
  // cuMemcpyDtoHAsync_v2, their _ptds/_ptsz forms and v1 names), u64 device pointer, u64 stream
  // (client handle; async calls only, else 0), u64 client host address, u64 n; the host range
  // lies in one mapped buffer. Reply (sync calls; async ones are one-way): CUresult. Host to
  // device: the kOpMappedWrite frames before it brought the buffer up to date. Device to host:
  // what the copy wrote reaches the client as kOpMappedUpdate frames, before the reply (sync)
  // or before the reply of a later synchronizing call (async).
  kOpMappedCopy = 40,
  // Managed memory (cuMemAllocManaged), mirrored like mapped host memory: the allocation itself
  // is the server's copy, and the client maps its copy at the same address, so the one pointer
  // is the device pointer on the server and the host pointer in the client. Request: u64 size,
  // u32 flags (CU_MEM_ATTACH_*). Reply: CUresult, then u64 the address. From then on it is a
  // mapped buffer whose client address, server address and device pointer are that address
  // (kOpMappedWrite, kOpMappedUpdate, kOpMappedCopy as above). It ends with the program's
  // cuMemFree_v2 (see kOpMappedUpdate), or with kOpMappedFree when the client cannot map the
  // address.
  kOpManagedAlloc = 41,
  // A kernel's or function's whole parameter layout in one round trip, for those whose layout the
  // client could not read from the image (cuKernelGetParamInfo asked index by index cost a round
  // trip per parameter: 142 at PyTorch start-up on the H200). Request: u64 id (client handle),
  // u8 kind: 0 a CUfunction, 1 a CUkernel, 2 either (the function reading, and the kernel one
  // when the driver refuses the handle as a function). Reply: CUresult; on success u32 n,
  // n × (u64 offset, u64 size) for parameters 0..n-1, i32 the driver's answer for parameter n
  // (CUDA_ERROR_INVALID_VALUE: past the last one; anything else: the walk stopped short), u8 the
  // kind that answered (0 or 1). At most kMaxParamLayout parameters are walked.
  kOpParamLayout = 42,  // codec: protocol/wire/launch.h
  // Every attribute of a kernel or function in one round trip (PyTorch start-up asked
  // cuKernelGetAttribute 60 times at 30 ms on the H200, a few attributes per kernel). Request:
  // u64 id, u8 kind (0 a CUfunction, 1 a CUkernel), i32 device (kernels only). Reply: CUresult;
  // on success u32 n, n × (i32 attribute, i32 the driver's result, i32 value) for attributes
  // 0..n-1 (n ≤ kMaxFuncAttributes).
  kOpFuncAttributes = 43,  // codec: protocol/wire/launch.h
  // Cluster occupancy for a run of cluster widths in one round trip (a PyTorch kernel's start-up
  // probes widths one by one: 82 cuOccupancyMaxActiveClusters at 30 ms on the H200). Request:
  // cuOccupancyMaxActiveClusters's (u64 function, u32 grid x y z, u32 block x y z, u32 shared
  // bytes, u64 stream, u32 n attrs, n × CUlaunchAttribute, one of them the cluster dimension),
  // then u32 first width, u32 count (≤ kMaxClusterTable), u8 1 when grid x follows the width.
  // Reply: CUresult; on success u32 count, count × (i32 the driver's result, i32 clusters) for
  // cluster widths first, first+1, ...
  kOpClusterOccupancyTable = 44,  // codec: protocol/wire/occupancy.h
  // cuMemAlloc_v2 and allocations ahead of the program's asking (client/device_memory.h).
  // Request: u64 size, u32 extra (≤ kMaxAllocAhead, and extra × size ≤ kMaxAllocAheadBytes).
  // Reply: CUresult (cuMemAlloc_v2's for the first allocation); on success u64 address, u32 n,
  // n × u64 addresses of further allocations of the same size in the current context (n ≤ extra:
  // the server stops at the first that fails).
  kOpAllocAhead = 45,  // codec: protocol/wire/control.h
  // Allocations a run is expected to ask for, made at once (client/device_memory.h: what the
  // previous run of the same program allocated). Request: u32 k (≤ kMaxAllocMany), k × (u64
  // size, u32 count); at most kMaxAllocManyCount allocations and kMaxAllocManyBytes in all.
  // Reply: CUresult; on success u32 k, k × (u32 n, n × u64 address): n ≤ count (the server stops
  // at the first allocation that fails or would leave less than a quarter of the device free).
  kOpAllocMany = 46,  // codec: protocol/wire/control.h
  // CUBLASLT_1734DC26 slot 4 (client/dark_api/cluster_topology.cpp has what is known of it): the
  // byte per TPC that cuBLASLt reads to lay thread-block clusters out over the GPCs. Request: u64
  // context (client handle; 0: the calling thread's current context). Reply: CUresult of slot 4;
  // on success u32 n (≤ kMaxClusterTopology), then n bytes: the first n of what the slot handed
  // out, n = the context's device's multiprocessor count / 2 (what cuBLASLt 13.0 reads), or 0
  // when the slot handed out no data. The server hands the data back to its driver (slot 13).
  kOpClusterTopology = 47,  // codec: protocol/wire/dark_api.h
  // Several servers under one client (RGPU_SERVER=a,b; docs/design.md §6): the client numbers its
  // servers 0, 1, ... and every handle id carries its server's number in bits kHandleServerShift
  // and up ("Handles on the wire" below), so any call routes by the handles it names. Sent by the
  // client, before anything else, to every server but the first. Request: u8 the server's number
  // (1..kMaxServers-1). Reply: CUresult (CUDA_ERROR_INVALID_VALUE for 0); from then on the ids
  // this session mints carry the number. A server older than this op
  // answers CUDA_ERROR_NOT_SUPPORTED, which the client reports: it cannot serve as a second server.
  kOpHandleSpace = 48,
  // Copies between devices of two servers (cuMemcpyPeer*, cuMemcpyDtoD* with RGPU_SERVER=a,b):
  // the bytes go from the source server A straight to the destination server B over a link A
  // dials, never through the client (codecs: protocol/wire/copy.h; server/handlers/peer_copy.cpp).
  // kOpPeerTicket, to B: Request: nothing. Reply: CUresult, u16 port B's session listens on for
  //   links, 32 bytes ticket: a secret B keeps for this session, str B's certificate
  //   fingerprint ("sha256:HEX"; empty when B's session runs plain TCP). The client asks once per
  //   pair of servers; A presents the ticket each time it dials B (the first copy, and the first
  //   after the link closed). When B's session runs over TLS, so do its
  //   links: A verifies B by that fingerprint (which reached the client inside the TLS connection
  //   the client verified), and B knows A by the ticket.
  // kOpPeerSend, to A (one-way for async copies): u64 copy id (client-chosen, unique in the
  //   client process), str B's host (as the client dialled it), u16 port, 32 bytes ticket, u64
  //   src, u64 n, u8 has stream, u64 stream, str B's fingerprint (empty: a plain link). Reply:
  //   CUresult; when the link could not be dialled or broke, str what happened and what to check
  //   (at most kMaxPeerSendError bytes). A dials B
  //   once and keeps the link; a copy that finds it closed by B (B's end hung up or reset) dials
  //   again, once (over TLS: the TlsPreamble, kind kTlsNew, then the TLS handshake; then, inside
  //   it, kPeerLinkMagic and the ticket) and, after
  //   the stream's earlier work (its context's, without a stream), sends the copy's bytes as
  //   chunks: u64 copy id, u32 length (at most kPeerChunk), the bytes; a length of
  //   kPeerChunkFailed, followed by i32 CUresult, tells B the copy failed at A. Before that wait
  //   A names the copy on the link with a length of kPeerChunkPending and no bytes: B then waits
  //   for the bytes as long as the link lives, however long A's stream takes, and fails the copy
  //   when the link ends.
  // kOpPeerReceive, to B (one-way for async copies): u64 copy id, u64 dst, u64 n, u8 has
  //   stream, u64 stream. B, in the order of the calls of the client thread, waits for the
  //   stream's earlier work (its context's, without a stream), then writes the copy's bytes to
  //   dst as they arrive, so calls after it on that stream find them there.
  // kOpPeerCancel, to B, one-way, from the client: u64 copy id, i32 CUresult. A answered the
  //   synchronous copy with that failure without reaching B (it could not dial the link): B's
  //   receive of the copy ends with it instead of waiting for bytes that will not come. B's
  //   reading thread takes it itself, since the worker that would run it is the one waiting.
  kOpPeerTicket = 49,
  kOpPeerSend = 50,
  kOpPeerReceive = 51,
  kOpPeerCancel = 52,
  // Reply to a request whose op the server does not know: prefix, then i32 CUDA_ERROR_NOT_SUPPORTED.
  // (No separate op: the reply carries the request's op.)
  kFirstCudaOp = 256,
  // NCCL calls (rgpu's libnccl.so.2, client/nccl/; docs/design.md §6) are numbered from here,
  // below the NVML ops and far above the CUDA ones; protocol/wire/nccl.h lists them and their
  // layouts. They travel on the CUDA shim's connection to the server of the communicator's device,
  // with the same frames, ReplyPrefix and ordering as CUDA calls.
  kFirstNcclOp = 7168,
  // NVML calls (rgpu's libnvidia-ml.so.1, client/nvml/) are numbered from here, from the
  // append-only registry codegen/nvml_op_ids.txt (gen/nvml_ops.gen.h); CUDA ops stay below it.
  // They travel on a connection of their own, with the same frames, handshake and ReplyPrefix;
  // the reply's result is an nvmlReturn_t. Handles (nvmlDevice_t, ...) are ids the server hands
  // out. Arrays carry at most kNvmlMaxArray elements, output strings at most kNvmlMaxString bytes.
  kFirstNvmlOp = 8192,
};
inline constexpr uint32_t kNvmlMaxArray = 4096;
// Server-to-server copy links (kOpPeerSend): the dialling server's first bytes, then chunks.
inline constexpr uint32_t kPeerLinkMagic = 0x50504752;  // "RGPP" on the wire
inline constexpr size_t kPeerTicketBytes = 32;
inline constexpr uint32_t kPeerChunk = 4u << 20;
inline constexpr uint32_t kPeerChunkFailed = 0xffffffff;
inline constexpr uint32_t kPeerChunkPending = 0xfffffffe;
inline constexpr size_t kMaxPeerSendError = 1024;
// kOpParamLayout walks at most this many parameters (past the driver's own limit: 32764 bytes).
inline constexpr uint32_t kMaxParamLayout = 4096;
// kOpFuncAttributes answers at most this many attributes.
inline constexpr uint32_t kMaxFuncAttributes = 64;
// kOpClusterOccupancyTable answers at most this many cluster widths.
inline constexpr uint32_t kMaxClusterTable = 64;
// kOpClusterTopology answers at most this many bytes.
inline constexpr uint32_t kMaxClusterTopology = 4096;
// kOpAllocAhead makes at most this many further allocations, of at most this many bytes in all.
inline constexpr uint32_t kMaxAllocAhead = 32;
inline constexpr uint64_t kMaxAllocAheadBytes = 256ull << 20;
// kOpAllocMany: at most this many sizes, allocations and bytes.
inline constexpr uint32_t kMaxAllocMany = 1024;
inline constexpr uint32_t kMaxAllocManyCount = 16384;
inline constexpr uint64_t kMaxAllocManyBytes = 64ull << 30;
inline constexpr uint32_t kNvmlMaxString = 4096;
// kOpNotice: its kinds, and the longest text.
inline constexpr uint8_t kNoticeDraining = 0;
inline constexpr uint8_t kNoticeEnded = 1;
inline constexpr uint32_t kMaxNoticeText = 4096;
// kOpSessionControl's actions, the longest message its reply carries, and the state it gives
// when the driver could not say.
inline constexpr uint8_t kSessionSuspend = 1;
inline constexpr uint8_t kSessionResume = 2;
inline constexpr uint8_t kSessionMigrate = 3;
inline constexpr uint32_t kMaxSessionControlMessage = 4096;
inline constexpr uint8_t kSessionStateUnknown = 255;

// The channel (protocol/channel.h). After the handshake (and after kOpResumed on a resumed
// connection) every frame in both directions is preceded by a ChannelHeader:
//
//   offset size field
//   0      8    seq   this frame's number in its direction: 1, 2, 3, ... for every frame the
//                     endpoints exchange; 0 for the channel's own unnumbered frames
//                     (kOpChannelOpen, kOpHeartbeat), which are never resent
//   8      8    ack   the highest seq the sender has received whole from the peer: the peer may
//                     drop those frames from its replay buffer
//
// Rules: a numbered frame must be the next number or one already received (a resent duplicate,
// read and dropped); a gap, an ack above anything sent, an unnumbered frame of another op, or a
// first frame other than kOpChannelOpen is malformed and ends the session. The replay buffer
// holds what the peer has not acknowledged, at most RGPU_REPLAY_MAX_MB; a writer past it pings
// (kOpHeartbeat) for acknowledgements and waits. A side waiting for its peer pings after each
// RGPU_HEARTBEAT seconds of silence and treats 3 silent intervals as a broken connection.
struct ChannelHeader {
  uint64_t seq;
  uint64_t ack;
};
static_assert(sizeof(ChannelHeader) == 16);
inline constexpr uint16_t kChannelVersion = 1;

// Every reply payload begins with this. deferred_result is 0 (CUDA_SUCCESS) when no one-way call
// on this thread failed since the last reply; otherwise it is the first such failure and
// deferred_op names the call that failed.
struct ReplyPrefix {
  int32_t deferred_result;
  uint16_t deferred_op;
  uint16_t reserved;
};
static_assert(sizeof(ReplyPrefix) == 8);

// Handles on the wire. Client-side handles (CUstream, CUevent, CUmodule, ...) are opaque 64-bit
// ids, never server pointers: ids the client mints are below kServerMintedBit, ids the server
// mints (for handles a call returns that the client did not name) have it set. 0 is NULL, and
// 1 and 2 are CU_STREAM_LEGACY and CU_STREAM_PER_THREAD, which pass through unchanged.
// With several servers (kOpHandleSpace), bits kHandleServerShift..61 of every id a client or a
// server mints hold the number of the server that owns the handle (0 for the first, so with one
// server ids are as they always were).
inline constexpr uint64_t kFirstClientHandle = 0x1000;
inline constexpr uint64_t kServerMintedBit = 1ull << 62;
inline constexpr unsigned kHandleServerShift = 54;
inline constexpr unsigned kMaxServers = 256;  // what the 8 bits hold
inline constexpr uint64_t kHandleServerMask = (kMaxServers - 1ull) << kHandleServerShift;

}  // namespace rgpu::proto
