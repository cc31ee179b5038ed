"""Plays systemd for hopgate: socket activation and sd_notify.

Binds a listening TCP socket on 127.0.0.1:0 and a notify datagram socket,
starts `hopgate run --config CONFIG` with the listening socket as fd 3
(LISTEN_FDS=1, LISTEN_PID=<its pid>, LISTEN_FDNAMES=public) and
NOTIFY_SOCKET set, waits for READY=1, makes one request to the socket it
bound itself, sends SIGTERM and waits for STOPPING=1 and the exit. Prints
one `key=value` line per step for the Rust test to check."""
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
try:
    print("notify=" + notify.recv(4096).decode().replace("\n", ","), flush=True)
except socket.timeout:
    print("notify=timeout", flush=True)
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
conn.request("GET", "/activated")
resp = conn.getresponse()
resp.read()
conn.close()
print(f"status={resp.status}", flush=True)
child.send_signal(signal.SIGTERM)
try:
    print("notify=" + notify.recv(4096).decode().replace("\n", ","), flush=True)
except socket.timeout:
    print("notify=timeout", flush=True)
print(f"exit={child.wait(timeout=60)}", flush=True)
notify.close()
os.unlink(notify_path)
os.rmdir(notify_dir)
