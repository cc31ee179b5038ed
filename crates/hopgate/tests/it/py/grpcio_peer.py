"""A grpcio (C-core) server or client, for hopgate's interop test.

No generated code: methods are generic handlers over raw bytes.

  grpcio_peer.py server         -> prints "port N", serves until killed
  grpcio_peer.py client ADDR    -> runs the cases through ADDR, prints one
                                   JSON object with what it saw
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


def serve():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    handlers = {
        "UnaryOk": grpc.unary_unary_rpc_method_handler(unary_ok),
        "UnaryFail": grpc.unary_unary_rpc_method_handler(unary_fail),
        "StreamThree": grpc.unary_stream_rpc_method_handler(stream_three),
        "StreamThenFail": grpc.unary_stream_rpc_method_handler(stream_then_fail),
        "Slow": grpc.unary_unary_rpc_method_handler(slow),
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


if __name__ == "__main__":
    if sys.argv[1] == "server":
        serve()
    else:
        client(sys.argv[2])
