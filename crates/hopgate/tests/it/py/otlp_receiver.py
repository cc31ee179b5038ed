"""An OTLP/HTTP trace receiver for hopgate's span-export tests.

Decodes every POST body as an ExportTraceServiceRequest with the official
OpenTelemetry protobuf bindings (pip opentelemetry-proto) and appends one
JSON line per span to OUT:

  {"service": ..., "trace_id": hex, "span_id": hex, "parent_span_id": hex,
   "name": ..., "kind": "SERVER"|"CLIENT"|..., "flags": n,
   "start": ns, "end": ns, "status": n, "attributes": {key: value},
   "content_type": ..., "path": ...}

  otlp_receiver.py OUT   -> prints "port N", serves until killed
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

OUT = sys.argv[1]
LOCK = threading.Lock()


def value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        try:
            req = ExportTraceServiceRequest.FromString(body)
        except DecodeError as e:
            self.send_response(400)
            self.end_headers()
            self.wfile.write(str(e).encode())
            return
        lines = []
        for rs in req.resource_spans:
            res = {kv.key: value(kv.value) for kv in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    lines.append(json.dumps({
                        "service": res.get("service.name"),
                        "scope": ss.scope.name,
                        "trace_id": s.trace_id.hex(),
                        "span_id": s.span_id.hex(),
                        "parent_span_id": s.parent_span_id.hex(),
                        "name": s.name,
                        "kind": Span.SpanKind.Name(s.kind).removeprefix("SPAN_KIND_"),
                        "flags": s.flags,
                        "start": s.start_time_unix_nano,
                        "end": s.end_time_unix_nano,
                        "status": s.status.code,
                        "attributes": {kv.key: value(kv.value) for kv in s.attributes},
                        "content_type": self.headers.get("Content-Type"),
                        "api_key": self.headers.get("X-Api-Key"),
                        "path": self.path,
                    }))
        with LOCK, open(OUT, "a") as f:
            for line in lines:
                f.write(line + "\n")
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print("port", server.server_address[1], flush=True)
server.serve_forever()
