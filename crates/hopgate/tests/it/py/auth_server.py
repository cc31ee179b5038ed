"""A small authorization service for the forward-auth and fetched-JWKS
tests (tests/it/forward_auth.rs), on Python's standard library only.

  auth_server.py PORT [JWKS_FILE]  -> prints "port N", serves until killed

  GET /check      Authorization "Bearer good-USER": 200 with X-User: USER
                  (and X-Other, never copied); anything else: 401 with
                  WWW-Authenticate: Bearer realm="authsrv" and a body
  GET /login-check  302 to /login (Location), whatever the request
  GET /calls      {"calls": N}: how many checks it answered
  GET /last       the headers of the last check, as JSON (names lower-case)
  GET /jwks.json  JWKS_FILE as it is now (re-read on every request)
  GET /health     200
PORT 0 picks a free port; a restarted server passes the port it had.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATE = {"calls": 0, "last": {}}
JWKS = sys.argv[2] if len(sys.argv) > 2 else None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self, status, body, headers=()):
        data = body.encode()
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def check(self):
        with LOCK:
            STATE["calls"] += 1
            STATE["last"] = {k.lower(): v for k, v in self.headers.items()}
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer good-"):
            user = auth[len("Bearer good-"):]
            self.answer(200, "ok", [("X-User", user), ("X-Other", "no")])
        else:
            self.answer(
                401,
                "denied by authsrv\n",
                [("WWW-Authenticate", 'Bearer realm="authsrv"'), ("Content-Type", "text/plain")],
            )

    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/check":
            self.check()
        elif path == "/login-check":
            with LOCK:
                STATE["calls"] += 1
            self.answer(302, "", [("Location", "/login")])
        elif path == "/calls":
            with LOCK:
                n = STATE["calls"]
            self.answer(200, json.dumps({"calls": n}), [("Content-Type", "application/json")])
        elif path == "/last":
            with LOCK:
                last = dict(STATE["last"])
            self.answer(200, json.dumps(last), [("Content-Type", "application/json")])
        elif path == "/jwks.json" and JWKS:
            with open(JWKS, encoding="utf-8") as f:
                self.answer(200, f.read(), [("Content-Type", "application/json")])
        elif path == "/health":
            self.answer(200, "ok")
        else:
            self.answer(404, "not found")

    def log_message(self, *args):
        pass


def main():
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    server.daemon_threads = True
    print(f"port {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
