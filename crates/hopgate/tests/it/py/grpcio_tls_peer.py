"""A grpcio (C-core) server or client over TLS, for hopgate's gRPC-over-TLS
test: TLS from the client to the gateway, and from the gateway to the
server. Handlers as in grpcio_peer.py (generic, over raw bytes).

  grpcio_tls_peer.py server CERT KEY       -> prints "port N", serves
  grpcio_tls_peer.py client ADDR CA NAME   -> prints one JSON object
"""
import json
import os
import sys
from concurrent import futures

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpcio_peer as peer  # noqa: E402


def serve(cert, key):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    handlers = {
        "UnaryOk": grpc.unary_unary_rpc_method_handler(peer.unary_ok),
        "UnaryFail": grpc.unary_unary_rpc_method_handler(peer.unary_fail),
        "StreamThree": grpc.unary_stream_rpc_method_handler(peer.stream_three),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(peer.SERVICE, handlers),))
    with open(cert, "rb") as c, open(key, "rb") as k:
        creds = grpc.ssl_server_credentials(((k.read(), c.read()),))
    port = server.add_secure_port("127.0.0.1:0", creds)
    server.start()
    print("port %d" % port, flush=True)
    server.wait_for_termination()


def client(addr, ca, name):
    with open(ca, "rb") as f:
        creds = grpc.ssl_channel_credentials(root_certificates=f.read())
    out = {}
    options = (("grpc.ssl_target_name_override", name), ("grpc.default_authority", name))
    with grpc.secure_channel(addr, creds, options=options) as ch:
        call = lambda m: ch.unary_unary("/%s/%s" % (peer.SERVICE, m))
        stream = lambda m: ch.unary_stream("/%s/%s" % (peer.SERVICE, m))
        out["unary_ok"] = call("UnaryOk")(b"hi", timeout=20).decode()
        out["stream_three"] = [m.decode() for m in stream("StreamThree")(b"", timeout=20)]
        try:
            call("UnaryFail")(b"x", timeout=20)
            out["unary_fail"] = "no error"
        except grpc.RpcError as e:
            out["unary_fail"] = peer.error_of(e)
    print(json.dumps(out))


if __name__ == "__main__":
    if sys.argv[1] == "server":
        serve(sys.argv[2], sys.argv[3])
    else:
        client(sys.argv[2], sys.argv[3], sys.argv[4])
