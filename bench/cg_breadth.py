#!/usr/bin/env python3
"""How much distinct code one request runs, from a callgrind profile.

    python3 bench/cg_breadth.py CG_OUT REQUESTS [--top N] [--share F]

CG_OUT comes from `CG_INSTR=on bash bench/callgrind.sh ...` (counts per
instruction; add CG_CACHE=on for instruction-cache misses per function),
REQUESTS is the request count that script prints. An instruction counts as
part of the request path when it ran at least F times per request (default
0.5). For each object file the report gives those instructions' number,
their bytes, the 64-byte cache lines they sit on, the fewest lines they
could sit on, and the fill (bytes used of the lines touched); then the
functions that touch most lines. Code that runs once per request in many
lines misses the instruction cache on every request; a loop over few lines
does not.
"""

import argparse
import collections
import re

REF = re.compile(r"\((\d+)\)(?: (.*))?")


def name(token, table):
    """Resolves callgrind's name compression: `(id) name` defines, `(id)` refers."""
    m = REF.match(token)
    if not m:
        return token
    if m.group(2):
        table[m.group(1)] = m.group(2)
    return table.get(m.group(1), m.group(1))


def read(path):
    """Self cost per (object, address): [Ir, I1mr], and each address's function."""
    names, objs = {}, {}
    events = []
    cost = collections.defaultdict(lambda: [0, 0])
    func_of = {}
    obj = fn = None
    addr = 0
    skip = False
    for raw in open(path):
        line = raw.rstrip("\n")
        if not line:
            continue
        if line.startswith("events:"):
            events = line.split()[1:]
            continue
        if line.startswith("ob="):
            obj = name(line[3:], objs)
            continue
        if line.startswith("fn="):
            fn = name(line[3:], names)
            continue
        if line.startswith("cob="):
            name(line[4:], objs)
            continue
        if line.startswith("cfn="):
            name(line[4:], names)
            continue
        if line.startswith("calls="):
            skip = True  # the next line is a call's inclusive cost
            continue
        if not (line[0].isdigit() or line[0] in "+-*"):
            continue
        fields = line.split()
        a = fields[0]
        if a[0] in "+-":
            addr += int(a, 0)
        elif a != "*":
            addr = int(a, 0)
        if skip:
            skip = False
            continue
        values = fields[2:]  # positions are "instr line"
        key = (obj, addr)
        entry = cost[key]
        for i, ev in enumerate(("Ir", "I1mr")):
            if ev in events and events.index(ev) < len(values):
                entry[i] += int(values[events.index(ev)])
        func_of[key] = fn
    return events, cost, func_of


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile")
    ap.add_argument("requests", type=int)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--share", type=float, default=0.5)
    args = ap.parse_args()
    n = args.requests
    events, cost, func_of = read(args.profile)
    if "I1mr" not in events:
        print("(no cache simulation in this profile: I1 misses not shown)")
    by_obj = collections.defaultdict(list)
    for (obj, addr), c in cost.items():
        by_obj[obj].append((addr, c))
    for obj, rows in sorted(by_obj.items(), key=lambda r: -sum(c[0] for _, c in r[1])):
        rows.sort()
        hot = []
        for i, (addr, c) in enumerate(rows):
            if c[0] < args.share * n:
                continue
            # An instruction's size: the distance to the next one listed,
            # when that is a plausible x86 length; else an average one.
            nxt = rows[i + 1][0] if i + 1 < len(rows) else addr + 5
            size = nxt - addr if 0 < nxt - addr <= 15 else 5
            hot.append((addr, size, c))
        if not hot:
            continue
        lines = {b for a, s, _ in hot for b in range(a >> 6, ((a + s - 1) >> 6) + 1)}
        size = sum(s for _, s, _ in hot)
        ir = sum(c[0] for _, _, c in hot) / n
        miss = sum(c[1] for _, c in rows) / n
        print(
            f"{obj.rsplit('/', 1)[-1]}: {len(hot)} instructions on the request path "
            f"({ir:.0f} executed per request), {size / 1024:.1f} KiB on {len(lines)} lines "
            f"(fewest possible {size / 64:.0f}, fill {size / 64 / len(lines):.2f}), "
            f"I1 misses per request {miss:.0f}"
        )
        per_fn = collections.defaultdict(lambda: [set(), 0, 0, 0])
        for addr, s, c in hot:
            e = per_fn[func_of[(obj, addr)]]
            e[0].update(range(addr >> 6, ((addr + s - 1) >> 6) + 1))
            e[1] += s
            e[2] += c[0] / n
        for addr, c in rows:
            if (obj, addr) in func_of and func_of[(obj, addr)] in per_fn:
                per_fn[func_of[(obj, addr)]][3] += c[1] / n
        top = sorted(per_fn.items(), key=lambda kv: -len(kv[1][0]))[: args.top]
        print(f"  {'lines':>5} {'fill':>5} {'Ir/req':>7} {'I1mr/req':>8}  function")
        for fn, (ls, s, ir_fn, miss_fn) in top:
            print(f"  {len(ls):5} {s / 64 / len(ls):5.2f} {ir_fn:7.0f} {miss_fn:8.1f}  {fn[:100]}")


if __name__ == "__main__":
    main()
