"""A small authoritative DNS server for hopgate's DNS discovery tests
(tests/it/dns.rs), built on dnslib's wire format (pip dnslib).

Serves the records of a JSON file that it reads again on every query, so a
test changes the answers by rewriting the file:

  {"ttl": 1,
   "mode": "ok" | "servfail" | "drop",       # drop: never answer (timeout)
   "a":    {"api.test.": ["127.0.0.2", "127.0.0.3"]},
   "aaaa": {"api6.test.": ["::1"]},
   "srv":  {"_http._tcp.api.test.": [[priority, weight, port, "t1.api.test."]]}}

A name with no record of the asked type answers NOERROR with no answer;
an unknown name answers NXDOMAIN.

  dns_server.py RECORDS.json   -> prints "port N" (UDP and TCP on
                                  127.0.0.1), serves until killed
"""
import json
import socket
import socketserver
import struct
import sys
import threading

from dnslib import AAAA, QTYPE, RCODE, RR, SRV, A, DNSRecord

RECORDS = sys.argv[1]


def answer(data):
    """The reply to one query packet, or None to stay silent."""
    try:
        with open(RECORDS) as f:
            db = json.load(f)
    except (OSError, ValueError):
        db = {"mode": "servfail"}
    req = DNSRecord.parse(data)
    reply = req.reply()
    mode = db.get("mode", "ok")
    if mode == "drop":
        return None
    if mode == "servfail":
        reply.header.rcode = RCODE.SERVFAIL
        return reply.pack()
    ttl = int(db.get("ttl", 1))
    q = req.q
    name = str(q.qname).lower()
    known = any(name in db.get(k, {}) for k in ("a", "aaaa", "srv"))
    if not known:
        reply.header.rcode = RCODE.NXDOMAIN
        return reply.pack()
    if q.qtype == QTYPE.A:
        for ip in db.get("a", {}).get(name, []):
            reply.add_answer(RR(q.qname, QTYPE.A, ttl=ttl, rdata=A(ip)))
    elif q.qtype == QTYPE.AAAA:
        for ip in db.get("aaaa", {}).get(name, []):
            reply.add_answer(RR(q.qname, QTYPE.AAAA, ttl=ttl, rdata=AAAA(ip)))
    elif q.qtype == QTYPE.SRV:
        for prio, weight, port, target in db.get("srv", {}).get(name, []):
            reply.add_answer(RR(q.qname, QTYPE.SRV, ttl=ttl,
                                rdata=SRV(priority=prio, weight=weight, port=port, target=target)))
    return reply.pack()


class Udp(socketserver.BaseRequestHandler):
    def handle(self):
        data, sock = self.request
        out = answer(data)
        if out is not None:
            sock.sendto(out, self.client_address)


class Tcp(socketserver.BaseRequestHandler):
    def handle(self):
        head = self.request.recv(2)
        if len(head) < 2:
            return
        (n,) = struct.unpack("!H", head)
        data = b""
        while len(data) < n:
            chunk = self.request.recv(n - len(data))
            if not chunk:
                return
            data += chunk
        out = answer(data)
        if out is not None:
            self.request.sendall(struct.pack("!H", len(out)) + out)


def main():
    # UDP and TCP on the same free port (retry when TCP's is taken).
    for _ in range(50):
        udp = socketserver.ThreadingUDPServer(("127.0.0.1", 0), Udp)
        port = udp.server_address[1]
        try:
            tcp = socketserver.ThreadingTCPServer(("127.0.0.1", port), Tcp)
        except OSError:
            udp.server_close()
            continue
        break
    else:
        sys.exit("no free port")
    for s in (udp, tcp):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    print(f"port {port}", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
