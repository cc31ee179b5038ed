"""A grpcio (C-core) server or client, for hopgate's interop test.

No generated code: methods are generic handlers over raw bytes.

  grpcio_peer.py server         -> prints "port N", serves until killed
  grpcio_peer.py client ADDR    -> runs the cases through ADDR, prints one
                                   JSON object with what it saw
  grpcio_peer.py headers ADDR   -> calls Headers (ok and failing) with
                                   metadata, prints what both ends saw
"""
import json
import sys
import time
from concurrent import futures

import grpc

SERVICE = "interop.Probe"


def unary_ok(request, context):
    return b"echo:" + request


def unary_fail(request, context):
    context.set_trailing_metadata((("x-detail", "kept"), ("x-code-bin", b"\x00\x01")))
    context.abort(grpc.StatusCode.FAILED_PRECONDITION, "the cart is locked")


def stream_three(request, context):
    for i in range(3):
        yield b"item-%d" % i


def stream_then_fail(request, context):
    yield b"first"
    context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "quota gone after one")


def slow(request, context):
    time.sleep(2)
    return b"late"


def headers(request, context):
    """Answers the request metadata it got (as JSON), with initial metadata
    and trailing metadata of its own; fails when asked to."""
    got = dict(context.invocation_metadata())
    context.send_initial_metadata((("x-server-initial", "a"), ("x-keep-initial", "b")))
    context.set_trailing_metadata((("x-trailer", "t"),))
    if request == b"fail":
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, "asked to fail")
    seen = {k: got.get(k) for k in ("x-probe", "x-route", "x-drop", "x-keep")}
    return json.dumps(seen).encode()


def serve():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    handlers = {
        "UnaryOk": grpc.unary_unary_rpc_method_handler(unary_ok),
        "UnaryFail": grpc.unary_unary_rpc_method_handler(unary_fail),
        "StreamThree": grpc.unary_stream_rpc_method_handler(stream_three),
        "StreamThenFail": grpc.unary_stream_rpc_method_handler(stream_then_fail),
        "Slow": grpc.unary_unary_rpc_method_handler(slow),
        "Headers": grpc.unary_unary_rpc_method_handler(headers),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print("port %d" % port, flush=True)
    server.wait_for_termination()


def error_of(e):
    md = dict((k, v if isinstance(v, str) else v.hex()) for k, v in (e.trailing_metadata() or ()))
    return {"code": e.code().name, "details": e.details(), "trailers": md}


def client(addr):
    out = {}
    with grpc.insecure_channel(addr) as ch:
        call = lambda m: ch.unary_unary("/%s/%s" % (SERVICE, m))
        stream = lambda m: ch.unary_stream("/%s/%s" % (SERVICE, m))
        out["unary_ok"] = call("UnaryOk")(b"hi", timeout=10).decode()
        try:
            call("UnaryFail")(b"x", timeout=10)
            out["unary_fail"] = "no error"
        except grpc.RpcError as e:
            out["unary_fail"] = error_of(e)
        out["stream_three"] = [m.decode() for m in stream("StreamThree")(b"", timeout=10)]
        got = []
        try:
            for m in stream("StreamThenFail")(b"", timeout=10):
                got.append(m.decode())
            out["stream_then_fail"] = {"items": got, "error": None}
        except grpc.RpcError as e:
            out["stream_then_fail"] = {"items": got, "error": error_of(e)}
        try:
            call("Slow")(b"", timeout=0.5)
            out["deadline"] = "no error"
        except grpc.RpcError as e:
            out["deadline"] = e.code().name
        try:
            ch.unary_unary("/%s/Missing" % SERVICE)(b"", timeout=10)
            out["unimplemented"] = "no error"
        except grpc.RpcError as e:
            out["unimplemented"] = e.code().name
    print(json.dumps(out), flush=True)


def headers_client(addr):
    out = {}
    metadata = (("x-drop", "1"), ("x-keep", "2"))
    with grpc.insecure_channel(addr) as ch:
        call = ch.unary_unary("/%s/Headers" % SERVICE)
        resp, c = call.with_call(b"ok", timeout=10, metadata=metadata)
        out["ok"] = {
            "code": c.code().name,
            "seen": json.loads(resp.decode()),
            "initial": dict(c.initial_metadata()),
            "trailers": dict(c.trailing_metadata()),
        }
        try:
            call.with_call(b"fail", timeout=10, metadata=metadata)
            out["fail"] = "no error"
        except grpc.RpcError as e:
            out["fail"] = error_of(e)
            out["fail"]["initial"] = dict(e.initial_metadata() or ())
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "server":
        serve()
    elif sys.argv[1] == "headers":
        headers_client(sys.argv[2])
    else:
        client(sys.argv[2])
