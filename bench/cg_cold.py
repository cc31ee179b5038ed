#!/usr/bin/env python3
"""Which source lines put never-run code on the request path's cache lines.

    python3 bench/cg_cold.py CG_OUT BIN REQUESTS [--share F] [--top N]

CG_OUT comes from `CG_INSTR=on bash bench/callgrind.sh BIN ...` with BIN a
build that has line tables (`cargo build --profile profiling`). A cache
line is on the request path when an instruction on it ran at least F times
per request (default 0.5, as bench/cg_breadth.py counts). Every byte of
BIN's code on such a line that ran less often is fetched with the line for
nothing; this script disassembles those lines, maps each such instruction
to the source line it came from (the innermost frame in this repository,
through inlining) and prints the source lines that put most bytes there.
Those are the places where a `std::hint::cold_path()` or an out-of-line
`#[cold]` function moves code off the hot lines.
"""

import argparse
import collections
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cg_breadth import read  # noqa: E402

INSN = re.compile(r"^\s*([0-9a-f]+):\s")


def load_base(bin_path, rows):
    """The offset between the profile's addresses and the binary's (0 for
    the PIE builds measured so far; 0x108000 and 0x400000 are the other
    candidates): the one that puts most executed addresses on a
    function's first byte."""
    syms = subprocess.run(
        ["nm", "--defined-only", bin_path], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    starts = [int(f[0], 16) for f in (s.split() for s in syms) if len(f) == 3 and f[1] in "tT"]
    executed = {a for a, _ in rows}
    hits = {b: sum(1 for s in starts if s + b in executed) for b in (0x108000, 0, 0x400000)}
    return max(hits, key=hits.get)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile")
    ap.add_argument("binary")
    ap.add_argument("requests", type=int)
    ap.add_argument("--share", type=float, default=0.5)
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    n = args.requests
    _, cost, _ = read(args.profile)
    name = os.path.basename(args.binary)
    rows = sorted((a, c[0]) for (o, a), c in cost.items() if o and o.endswith("/" + name))
    if not rows:
        sys.exit(f"no costs of {name} in {args.profile}")
    base = load_base(args.binary, rows)
    ran = {a - base: ir for a, ir in rows}
    hot_lines = sorted({a >> 6 for a, ir in ran.items() if ir >= args.share * n})
    # Disassemble the hot lines (joined into runs) to find every
    # instruction on them, run or not.
    runs = []
    for ln in hot_lines:
        if runs and runs[-1][1] == ln:
            runs[-1][1] = ln + 1
        else:
            runs.append([ln, ln + 1])
    cold = []  # (addr, size)
    for lo, hi in runs:
        out = subprocess.run(
            [
                "objdump", "-d", "--no-show-raw-insn",
                f"--start-address={lo << 6:#x}", f"--stop-address={hi << 6:#x}", args.binary,
            ],
            capture_output=True, text=True, check=True,
        ).stdout
        addrs = [int(m.group(1), 16) for m in map(INSN.match, out.split("\n")) if m]
        for i, a in enumerate(addrs):
            size = (addrs[i + 1] if i + 1 < len(addrs) else hi << 6) - a
            if ran.get(a, 0) < args.share * n and 0 < size <= 15:
                cold.append((a, size))
    total = sum(s for _, s in cold)
    print(
        f"load base {base:#x}; {len(hot_lines)} request-path lines of {name}, "
        f"{total} bytes on them ran less than {args.share} times per request "
        f"(fill {(len(hot_lines) * 64 - total) / (len(hot_lines) * 64):.2f})"
    )
    res = subprocess.run(
        ["addr2line", "-i", "-a", "-e", args.binary],
        input="\n".join(f"{a:#x}" for a, _ in cold),
        capture_output=True, text=True, check=True,
    ).stdout.split("\n")
    where = {}
    cur = None
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for line in res:
        if line.startswith("0x"):
            cur = int(line, 16)
            continue
        if cur is not None and cur not in where and "crates/" in line:
            where[cur] = line.replace(repo + "/", "").split(" ")[0]
    by_src = collections.Counter()
    for a, s in cold:
        by_src[where.get(a, "(outside this repository)")] += s
    print(f"{'bytes':>6}  source line (innermost frame in this repository)")
    for src, b in by_src.most_common(args.top):
        print(f"{b:6}  {src}")


if __name__ == "__main__":
    main()
