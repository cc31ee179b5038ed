"""A third-party client for the upgrade test: one new TCP connection per
request (Python's http.client), until the stop file appears. Prints
`ok=N failed=M refused=R` and the first errors seen."""
import http.client
import os
import sys

host, port, stop = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ok = failed = refused = 0
errors = []
while not os.path.exists(stop):
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        try:
            conn.connect()
        except OSError as e:
            refused += 1
            errors.append(f"connect: {e!r}")
            continue
        conn.request("GET", "/py")
        resp = conn.getresponse()
        resp.read()
        if resp.status == 200:
            ok += 1
        else:
            failed += 1
            errors.append(f"status {resp.status}")
    except Exception as e:  # noqa: BLE001 - every failure counts
        failed += 1
        errors.append(repr(e))
    finally:
        conn.close()
print(f"ok={ok} failed={failed} refused={refused}")
for e in errors[:10]:
    print(e)
