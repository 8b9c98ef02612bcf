"""A tiny client side of the rgpu wire (protocol/messages.h, protocol/handshake.h) for tests that
need to say things the real shim never says: raw frames, bad handshakes, hostile payloads.

    c = Conn(server.addr)            # connects and runs the handshake (token=... for a token server)
    c.call(OPS["cuMemGetInfo_v2"], b"\\x01\\x01")   # -> Reply(deferred_result, deferred_op, result, body)

Frames are the 16-byte header `<IHHII` (length, op, flags, request_id, thread_id), little-endian.
"""
import hashlib
import hmac
import os
import re
import socket
import struct
from collections import namedtuple
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _load_protocol():
    """The constants of protocol/messages.h, read from it: never a copy that could drift (the ctest
    rgpu_wire_layout checks what this reads against the C++ compiler's values)."""
    text = (ROOT / "protocol/messages.h").read_text()
    text = re.sub(r"//[^\n]*", "", text)
    names = {}

    def body(enum):
        return re.search(r"enum %s : \w+ \{(.*?)\};" % enum, text, re.S).group(1)

    for enum in ("FrameFlags", "Capability", "Op"):
        for m in re.finditer(r"(k\w+) = ([^,]+),", body(enum)):
            names[m.group(1)] = eval(m.group(2).replace("ull", ""), {}, dict(names))  # "1 << 3", numbers
    for m in re.finditer(r"inline constexpr \w+ (k\w+) = ([^;]+);", text):
        value = re.sub(r"(?<=\d)(ull|u)\b", "", m.group(2))
        names[m.group(1)] = eval(value, {}, dict(names))
    return names


# Every constant of protocol/messages.h by its C++ name: CONTROL["kOpModuleByHash"] == 20.
CONTROL = _load_protocol()

HEADER = struct.Struct("<IHHII")
assert HEADER.size == CONTROL["kHeaderSize"]
MAGIC = CONTROL["kMagic"]
VERSION = CONTROL["kProtocolVersion"]
K_REPLY = CONTROL["kReply"]
K_NO_REPLY = CONTROL["kNoReply"]
OUR_CAPS = CONTROL["kOurCapabilities"]
REPLY_PREFIX = struct.Struct("<iHH")  # proto::ReplyPrefix

OP_HELLO, OP_CHALLENGE, OP_AUTH, OP_WELCOME, OP_REFUSED = (
    CONTROL[n] for n in ("kOpHello", "kOpChallenge", "kOpAuth", "kOpWelcome", "kOpRefused"))
OP_SNAPSHOT, OP_GOODBYE = CONTROL["kOpSnapshot"], CONTROL["kOpGoodbye"]

CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_NOT_INITIALIZED = 3
CUDA_ERROR_INVALID_CONTEXT = 201
CUDA_ERROR_INVALID_HANDLE = 400
CUDA_ERROR_NOT_SUPPORTED = 801


def _load_ops():
    text = (ROOT / "gen/ops.gen.h").read_text()
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s+(cu\w+) = (\d+),", text, re.M)}


# CUDA entry point name -> op id, from the generated registry.
OPS = _load_ops()

Reply = namedtuple("Reply", "deferred_result deferred_op result body")


class Refused(Exception):
    """The server sent Refused; str(e) is its reason."""


class Closed(Exception):
    """The server closed the connection."""


def header(op, payload_len, flags=0, request_id=0, thread_id=0):
    return HEADER.pack(payload_len, op, flags, request_id, thread_id)


def frame(op, payload=b"", flags=0, request_id=0, thread_id=0, length=None):
    return header(op, len(payload) if length is None else length, flags, request_id, thread_id) + payload


def put_str(s):
    b = s.encode()
    return struct.pack("<I", len(b)) + b


# Payloads of the calls the tests send by hand, laid out as protocol/wire/ writes them (the ctest
# rgpu_wire_layout compares each with the C++ codec's bytes).
def image_load(module_id, image):
    """cuModuleLoadData, cuLibraryLoadData (protocol/wire/module.h ImageLoad)."""
    return struct.pack("<QQ", module_id, len(image)) + image


def symbol_lookup(new_id, parent_id, name):
    """cuModuleGetFunction, cuLibraryGetKernel (protocol/wire/module.h SymbolLookup)."""
    return struct.pack("<QQ", new_id, parent_id) + put_str(name)


def module_by_hash(module_id, load_op, digest):
    """kOpModuleByHash (protocol/wire/module.h)."""
    return struct.pack("<QH", module_id, load_op) + digest


def param_layout_ask(handle_id, kind):
    """kOpParamLayout (protocol/wire/launch.h ParamLayoutAsk)."""
    return struct.pack("<QB", handle_id, kind)


def alloc_ahead(size, extra):
    """kOpAllocAhead (protocol/wire/control.h)."""
    return struct.pack("<QI", size, extra)


def session_control(action, pid, gpu=-1):
    """kOpSessionControl (protocol/wire/control.h SessionControl)."""
    return struct.pack("<BIi", action, pid, gpu)


def token_hint(token, nonce):
    """Hello's token hint (protocol/handshake.h, "Tenants"): which of the server's tokens, unrevealed."""
    return hmac.new(token.encode(), b"rgpu-token-hint" + nonce, hashlib.sha256).digest()[:16] if token else bytes(16)


def hello(identity="rgpu_wire@pytest pid=%d prog=rgpu_wire" % os.getpid(), magic=MAGIC, version=VERSION,
          caps=OUR_CAPS, nonce=None, token=None):
    """A Hello payload; returns (payload, client_nonce)."""
    nonce = nonce if nonce is not None else os.urandom(32)
    payload = struct.pack("<IHQ", magic, version, caps) + put_str(identity) + token_hint(token, nonce) + nonce
    return payload, nonce


def proof(token, label, first, second):
    return hmac.new(token.encode(), label + first + second, hashlib.sha256).digest()


def recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise Closed(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def recv_frame(sock):
    """(op, flags, request_id, thread_id, payload); raises Closed on EOF."""
    length, op, flags, rid, tid = HEADER.unpack(recv_exact(sock, HEADER.size))
    return op, flags, rid, tid, recv_exact(sock, length)


def peer_closed(sock, timeout=5.0):
    """True when the peer closes (or resets) the connection within timeout; unread data is skipped."""
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


class Conn:
    def __init__(self, addr, token=None, handshake=True, timeout=10.0, client_proof=None, identity=None):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.settimeout(timeout)
        self.next_request = 1
        self.session = None
        self.capabilities = None
        self.identity = identity
        if handshake:
            self.handshake(token, client_proof=client_proof)

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        self.sock.sendall(data)

    def handshake(self, token=None, client_proof=None):
        """Hello -> Challenge -> Auth -> Welcome. client_proof overrides the computed proof."""
        payload, client_nonce = hello(token=token) if self.identity is None else \
            hello(identity=self.identity, token=token)
        self.send(frame(OP_HELLO, payload))
        op, _, _, _, ch = self._expect(OP_CHALLENGE)
        magic, version, caps, token_required = struct.unpack_from("<IHQB", ch)
        server_nonce = ch[15:47]
        server_proof = ch[47:79]
        assert magic == MAGIC and version == VERSION, (magic, version)
        if token_required and token:
            expected = proof(token, b"rgpu-server-proof", client_nonce, server_nonce)
            assert hmac.compare_digest(expected, server_proof), "server proof does not match the token"
        if client_proof is None:
            client_proof = proof(token, b"rgpu-client-proof", server_nonce, client_nonce) if token_required and token \
                else bytes(32)
        self.send(frame(OP_AUTH, client_proof))
        _, _, _, _, wel = self._expect(OP_WELCOME)
        self.session = wel[:16]
        self.capabilities = struct.unpack_from("<Q", wel, 16)[0]

    def _expect(self, want):
        op, flags, rid, tid, payload = recv_frame(self.sock)
        if op == OP_REFUSED:
            (n,) = struct.unpack_from("<I", payload)
            raise Refused(payload[4:4 + n].decode(errors="replace"))
        assert op == want, f"expected message {want}, got {op}"
        return op, flags, rid, tid, payload

    def call(self, op, payload=b"", wants_reply=True, thread_id=1, flags=0):
        """Sends one request. With a reply wanted, returns Reply(deferred_result, deferred_op, result, body)
        where result is the leading i32 CUresult and body the bytes after it."""
        rid = self.next_request
        self.next_request += 1
        flags |= 0 if wants_reply else K_NO_REPLY
        self.send(frame(op, payload, flags, rid, thread_id))
        if not wants_reply:
            return None
        rop, rflags, rrid, rtid, body = recv_frame(self.sock)
        assert rflags & K_REPLY and rrid == rid and rop == op and rtid == thread_id, (rop, rflags, rrid, rtid)
        deferred_result, deferred_op, _ = REPLY_PREFIX.unpack_from(body)
        (result,) = struct.unpack_from("<i", body, REPLY_PREFIX.size)
        return Reply(deferred_result, deferred_op, result, body[REPLY_PREFIX.size + 4:])

    # A few calls every test wants.
    def snapshot(self):
        r = self.call(OP_SNAPSHOT)
        assert r.result == CUDA_SUCCESS, r
        (init_result, driver_version, device_count) = struct.unpack_from("<iiI", r.body)
        return init_result, driver_version, device_count

    def make_context_current(self, thread_id=1):
        r = self.call(OPS["cuDevicePrimaryCtxRetain"], struct.pack("<Bi", 1, 0), thread_id=thread_id)
        assert r.result == CUDA_SUCCESS, r
        (ctx_id,) = struct.unpack_from("<Q", r.body)
        r = self.call(OPS["cuCtxSetCurrent"], struct.pack("<Q", ctx_id), thread_id=thread_id)
        assert r.result == CUDA_SUCCESS, r
        return ctx_id

    def mem_get_info(self, thread_id=1):
        r = self.call(OPS["cuMemGetInfo_v2"], b"\x01\x01", thread_id=thread_id)
        if r.result != CUDA_SUCCESS:
            return r.result, None, None
        free, total = struct.unpack_from("<QQ", r.body)
        return r.result, free, total


def healthy_session(addr, token=None):
    """A full session: handshake, snapshot, primary context, cuMemGetInfo_v2. Returns total memory."""
    with Conn(addr, token=token) as c:
        init_result, _, count = c.snapshot()
        assert init_result == CUDA_SUCCESS and count >= 1
        c.make_context_current()
        rc, free, total = c.mem_get_info()
        assert rc == CUDA_SUCCESS and 0 < free <= total, (rc, free, total)
        c.send(frame(OP_GOODBYE, flags=K_NO_REPLY))
        return total
