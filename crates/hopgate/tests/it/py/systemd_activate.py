"""Plays systemd for hopgate: socket activation and sd_notify.

Binds a listening TCP socket on 127.0.0.1:0 and a notify datagram socket,
starts `hopgate run --config CONFIG` with the listening socket as fd 3
(LISTEN_FDS=1, LISTEN_PID=<its pid>, LISTEN_FDNAMES=public) and
NOTIFY_SOCKET set, waits for READY=1, makes one request to the socket it
bound itself, upgrades (`--upgrade`: the new process must report
MAINPID=<its pid> and READY=1 and serve the same socket), sends SIGTERM to
the new process and waits for STOPPING=1 and the exit. Prints one
`key=value` line per step for the Rust test to check."""
import http.client
import os
import signal
import socket
import subprocess
import sys
import tempfile

binary, config = sys.argv[1], sys.argv[2]
tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
tcp.bind(("127.0.0.1", 0))
tcp.listen(128)
port = tcp.getsockname()[1]
if tcp.fileno() != 3:
    os.dup2(tcp.fileno(), 3)
notify_dir = tempfile.mkdtemp()
notify_path = os.path.join(notify_dir, "notify.sock")
notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
notify.bind(notify_path)
notify.settimeout(30)
env = dict(os.environ, LISTEN_FDS="1", LISTEN_FDNAMES="public", NOTIFY_SOCKET=notify_path)
child = subprocess.Popen(
    ["sh", "-c", 'LISTEN_PID=$$; export LISTEN_PID; exec "$@"', "sh", binary, "run", "--config", config],
    env=env,
    pass_fds=(3,),
    stdout=subprocess.PIPE,
    stderr=subprocess.DEVNULL,
)
if tcp.fileno() == 3:
    tcp.detach()
else:
    tcp.close()
os.close(3)
print(f"port={port}", flush=True)
print("listening=" + child.stdout.readline().decode().strip(), flush=True)


def get(path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path)
    resp = conn.getresponse()
    resp.read()
    conn.close()
    return resp.status


def notified():
    try:
        return notify.recv(4096).decode().replace("\n", ",")
    except socket.timeout:
        return "timeout"


print("notify=" + notified(), flush=True)
print(f"status={get('/activated')}", flush=True)
# A binary upgrade hands the socket systemd passed on to the new process,
# which reports itself as the main process.
new = subprocess.Popen(
    [binary, "run", "--config", config, "--upgrade"],
    env=dict(os.environ, NOTIFY_SOCKET=notify_path),
    stdout=subprocess.PIPE,
    stderr=subprocess.DEVNULL,
)
print("upgraded=" + new.stdout.readline().decode().strip(), flush=True)
print("notify=" + notified().replace(f"MAINPID={new.pid}", "MAINPID=<new>"), flush=True)
print(f"old_exit={child.wait(timeout=60)}", flush=True)
print(f"status={get('/upgraded')}", flush=True)
new.send_signal(signal.SIGTERM)
print("notify=" + notified(), flush=True)
print(f"exit={new.wait(timeout=60)}", flush=True)
notify.close()
os.unlink(notify_path)
os.rmdir(notify_dir)
