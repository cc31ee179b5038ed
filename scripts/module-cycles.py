#!/usr/bin/env python3
"""Fails when modules of a crate import each other in a cycle (run by
scripts/ci.sh).

For every crate under crates/ (and any directory given on the command
line that holds a src/lib.rs or src/main.rs), builds the module-level
import graph from the source text: an edge a -> b for every path that
names module b from a file of module a (`crate::b::..`, `super::..`,
`self::..`, `use` trees with braces expanded, and names re-exported with
`pub use`). Edges between a module and its ancestor are left out: a
parent and its child may know each other. Any strongly connected set of
two or more modules left is a cycle, printed with one edge of each pair
that closes it, and the script exits 1.

A textual check like scripts/unused-deps.sh: no build needed, quick.
`--graph CRATE` prints the crate's edges instead, for the docs.
"""

import os
import re
import sys
from collections import defaultdict

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def strip_comments(text):
    """Removes // and /* */ comments and the contents of string literals."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            close = '"' + m.group(1)
            j = text.find(close, i + len(m.group(0)))
            out.append('""')
            i = n if j < 0 else j + len(close)
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""')
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]):
            m = re.match(r"'(\\.|[^\\'])'", text[i:])
            out.append("' '")
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def module_of(src, path):
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel in (["lib"], ["main"]):
        return ()
    if rel[-1] == "mod":
        rel = rel[:-1]
    return tuple(rel)


def expand_use(tree):
    """'a::{b, c::{d, e}}' -> ['a::b', 'a::c::d', 'a::c::e']."""
    tree = re.sub(r"\s+", "", tree)
    def parse(s):
        i = s.find("{")
        if i < 0:
            return [s]
        prefix, body = s[:i], s[i + 1:]
        depth, parts, cur = 0, [], ""
        for k, ch in enumerate(body):
            if ch == "{":
                depth += 1
            elif ch == "}":
                if depth == 0:
                    parts.append(cur)
                    rest = body[k + 1:]
                    break
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        else:
            rest = ""
        out = []
        for p in parts:
            if p:
                out += [prefix + x for x in parse(p)]
        return out
    return parse(tree)


def crate_graph(crate_dir):
    src = os.path.join(crate_dir, "src")
    files = {}
    for dirpath, _, names in os.walk(src):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(dirpath, name)
                files[module_of(src, path)] = strip_comments(open(path, encoding="utf-8").read())
    modules = set(files)
    # Names a module re-exports: (module, name) -> module the name comes from.
    reexports = {}
    uses = {}
    for mod, text in files.items():
        trees = []
        for m in re.finditer(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", text):
            for path in expand_use(m.group(2)):
                path = re.sub(r"\s+as\s+\w+$", "", path)
                trees.append((bool(m.group(1)), path))
        uses[mod] = trees
    def absolute(mod, path):
        parts = path.split("::")
        if parts[0] == "crate":
            base, parts = (), parts[1:]
        elif parts[0] == "self":
            base, parts = mod, parts[1:]
        elif parts[0] == "super":
            base = mod
            while parts and parts[0] == "super":
                base, parts = base[:-1], parts[1:]
        elif parts[0] in {m[len(mod)] for m in modules if len(m) > len(mod) and m[:len(mod)] == mod}:
            base = mod  # a child module named without self::
        else:
            return None
        return base + tuple(p for p in parts if p and p != "*")
    for mod, trees in uses.items():
        for public, path in trees:
            if not public:
                continue
            full = absolute(mod, path)
            if full and full[:-1] != () and full not in modules:
                reexports[(mod, full[-1])] = full
    def resolve(full, seen=0):
        best = ()
        for k in range(len(full), 0, -1):
            if full[:k] in modules:
                best = full[:k]
                break
        if len(full) > len(best) and (best, full[len(best)]) in reexports and seen < 8:
            target = reexports[(best, full[len(best)])]
            return resolve(target, seen + 1) if target != full else best
        return best
    edges = defaultdict(set)
    for mod, text in files.items():
        paths = [p for _, p in uses[mod]]
        paths += re.findall(r"\b((?:crate|super|self)(?:::\w+)+)", text)
        for path in paths:
            full = absolute(mod, path)
            if full is None:
                continue
            target = resolve(full)
            if target == mod or target[:len(mod)] == mod or mod[:len(target)] == target:
                continue  # itself, a descendant or an ancestor
            edges[mod].add(target)
    return modules, edges


def cycles(modules, edges):
    index, low, stack, on, out = {}, {}, [], set(), []
    sys.setrecursionlimit(10000)
    counter = [0]
    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in sorted(modules):
        if v not in index:
            visit(v)
    return out


def name(mod):
    return "::".join(mod) or "crate"


def main(argv):
    if len(argv) > 1 and argv[1] == "--graph":
        _, edges = crate_graph(os.path.join(ROOT, "crates", argv[2]))
        for a in sorted(edges):
            print(f"{name(a)} -> {', '.join(sorted(name(b) for b in edges[a]))}")
        return 0
    crates = argv[1:] or sorted(
        os.path.join(ROOT, "crates", c) for c in os.listdir(os.path.join(ROOT, "crates")))
    bad = 0
    for crate in crates:
        modules, edges = crate_graph(crate)
        for comp in cycles(modules, edges):
            bad = 1
            members = set(comp)
            print(f"cycle in {os.path.basename(crate)}: {', '.join(name(m) for m in comp)}")
            for a in comp:
                for b in sorted(edges[a] & members):
                    print(f"    {name(a)} -> {name(b)}")
    if not bad:
        print(f"module-cycles: no cycles in {len(crates)} crates")
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv))
