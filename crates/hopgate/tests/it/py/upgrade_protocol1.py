"""A running hopgate of an older release (upgrade protocol 1), played by
hand: it listens on the upgrade socket, refuses `HELLO 2` the way such a
process does (`BUSY unsupported protocol`), hands over its public and
admin sockets to `HELLO 1` (no STATE block), and drains on `DRAIN`.

usage: upgrade_protocol1.py SOCKET_PATH
Prints `port=<public port>` and `admin=<admin port>` once listening, then
one `hello=<line>` per HELLO received and `drain=ok` at the end.
"""

import os
import socket
import sys


def read_line(conn):
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = conn.recv(1)
        if not chunk:
            break
        buf += chunk
    return buf.decode().strip()


def main():
    path = sys.argv[1]
    public = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    public.bind(("127.0.0.1", 0))
    public.listen(128)
    admin = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    admin.bind(("127.0.0.1", 0))
    admin.listen(128)
    if os.path.exists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(4)
    server.settimeout(120)
    print(f"port={public.getsockname()[1]}", flush=True)
    print(f"admin={admin.getsockname()[1]}", flush=True)
    while True:
        conn, _ = server.accept()
        conn.settimeout(60)
        hello = read_line(conn)
        print(f"hello={hello}", flush=True)
        if not hello.startswith("HELLO 1 "):
            conn.sendall(b"BUSY unsupported protocol\n")
            conn.close()
            continue
        text = (
            "FDS 2\n"
            "listener\t127.0.0.1:0\tpublic\n"
            "admin\t127.0.0.1:0\tadmin\n"
            "END\n"
        ).encode()
        socket.send_fds(conn, [text], [public.fileno(), admin.fileno()])
        answer = read_line(conn)
        if answer != "DRAIN":
            print(f"drain={answer}", flush=True)
            return
        server.close()
        os.unlink(path)
        conn.sendall(b"DRAINING\n")
        conn.close()
        print("drain=ok", flush=True)
        return


if __name__ == "__main__":
    main()
