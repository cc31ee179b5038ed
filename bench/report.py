#!/usr/bin/env python3
"""Helper for bench/run.sh: parse one load-generator run, and print tables.

  report.py record --results FILE --kind matrix|restart --target T --scenario S
                   --rep N --tool wrk|h2load --output OUT [--h2log LOG]
                   --ticks T0 T1 [--user-sys-ticks U0 S0 U1 S1]
                   --origin-ticks O0 O1 --clk HZ [--no-proxy]
      parse OUT (wrk with bench/wrk-*.lua, or h2load + its --log-file) and
      append one tab-separated row to FILE.

  report.py table --results FILE --meta META [--md OUT.md]
      medians across repeats -> Markdown tables on stdout (and in OUT.md).

Standard library only (python3 >= 3.9).
"""
from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections import OrderedDict, defaultdict

COLUMNS = [
    "kind", "target", "scenario", "rep", "requests", "rps", "p50_us", "p99_us",
    "cpu_us_req", "origin_cpu_us_req", "user_us_req", "sys_us_req", "errors", "detail",
    "other_cpu_pct",
]
TARGET_ORDER = ["direct", "floor", "floor-hdr", "nginx", "haproxy", "hopgate", "hopgate-log",
                "hopgate-pgo", "hopgate-base"]
PROXIES = ["floor", "floor-hdr", "nginx", "haproxy", "hopgate", "hopgate-log", "hopgate-pgo",
           "hopgate-base"]
# What each target is, under the tables.
TARGET_NOTES = {
    "floor": "HAProxy in `mode tcp` (a pure L4 forward, no HTTP parsing): the kernel floor",
    "floor-hdr": "the same L4 floor, loaded with requests that carry the six lines hopgate "
                 "adds upstream (`x-request-id`, `x-forwarded-for`, `x-forwarded-proto`, "
                 "`x-route-rule-id`, `traceparent`, `x-upstream-addr`): the origins parse what "
                 "they parse behind hopgate",
    "hopgate-log": "hopgate with its access log on (the default), written to a file",
    "hopgate-pgo": "hopgate's profile-guided build (`scripts/build-pgo.sh`), same settings",
    "hopgate-base": "another hopgate build (`HOPGATE_BASE_BIN`), same settings",
}


# ------------------------------------------------------------------ parsing --
def parse_wrk(text: str) -> dict:
    m = re.search(r"^BENCH (.*)$", text, re.M)
    if not m:
        raise ValueError("no BENCH line in wrk output")
    kv = dict(item.split("=", 1) for item in m.group(1).split())
    v = {k: float(x) for k, x in kv.items()}
    dur_s = v["duration_us"] / 1e6
    sock = v["err_connect"] + v["err_read"] + v["err_write"] + v["err_timeout"]
    non200 = v["non200"]
    # With the status-counting script, non200 covers every non-200 response;
    # without it, wrk's own "Non-2xx or 3xx responses" counter does.
    bad_status = non200 if non200 >= 0 else v["err_status"]
    detail = (f"non2xx3xx={int(v['err_status'])}"
              + (f" non200={int(non200)}" if non200 >= 0 else "")
              + f" connect={int(v['err_connect'])} read={int(v['err_read'])}"
              f" write={int(v['err_write'])} timeout={int(v['err_timeout'])}")
    return {
        "requests": int(v["requests"]),
        "rps": v["requests"] / dur_s if dur_s > 0 else 0.0,
        "p50_us": v["p50_us"],
        "p99_us": v["p99_us"],
        "errors": int(bad_status + sock),
        "detail": detail,
    }


def percentile(sorted_vals: list, q: float) -> float:
    if not sorted_vals:
        return float("nan")
    k = max(0, min(len(sorted_vals) - 1, int(round(q / 100.0 * len(sorted_vals) + 0.5)) - 1))
    return float(sorted_vals[k])


def parse_h2load(text: str, log_path: str | None) -> dict:
    m = re.search(r"finished in ([\d.]+)(m?s), ([\d.]+) req/s", text)
    r = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                  r"(\d+) failed, (\d+) errored, (\d+) timeout", text)
    s = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", text)
    if not (m and r):
        raise ValueError("unexpected h2load output")
    done, ok, failed, errored, timeout = (int(r.group(i)) for i in (3, 4, 5, 6, 7))
    non2xx = (int(s.group(3)) + int(s.group(4))) if s else 0
    lat = []
    if log_path:
        with open(log_path) as f:
            for line in f:
                parts = line.split("\t")
                if len(parts) >= 3 and parts[1] != "-1":
                    lat.append(int(parts[2]))
    lat.sort()
    return {
        "requests": done,
        "rps": float(m.group(3)),
        "p50_us": percentile(lat, 50),
        "p99_us": percentile(lat, 99),
        "errors": failed + errored + timeout + non2xx,
        "detail": f"succeeded={ok} failed={failed} errored={errored} timeout={timeout} 4xx5xx={non2xx}",
    }


def cmd_record(a) -> int:
    with open(a.output, errors="replace") as f:
        text = f.read()
    try:
        res = parse_wrk(text) if a.tool == "wrk" else parse_h2load(text, a.h2log)
    except (ValueError, KeyError) as e:
        print(f"[bench] {a.target} {a.scenario}: could not parse {a.tool} output ({e}):\n"
              + "\n".join(text.splitlines()[-8:]), file=sys.stderr)
        res = {"requests": 0, "rps": 0.0, "p50_us": float("nan"), "p99_us": float("nan"),
               "errors": -1, "detail": "run failed"}
    n = res["requests"]
    to_us = 1e6 / a.clk
    cpu = (a.ticks[1] - a.ticks[0]) * to_us / n if n and not a.no_proxy else float("nan")
    ocpu = (a.origin_ticks[1] - a.origin_ticks[0]) * to_us / n if n else float("nan")
    user = sys_ = float("nan")
    if a.user_sys_ticks and n and not a.no_proxy:
        u0, s0, u1, s1 = a.user_sys_ticks
        user, sys_ = (u1 - u0) * to_us / n, (s1 - s0) * to_us / n
    other = float("nan")
    if a.sys_ticks and a.loadgen_ticks:
        b0, t0, b1, t1 = a.sys_ticks
        ours = ((a.ticks[1] - a.ticks[0]) + (a.origin_ticks[1] - a.origin_ticks[0])
                + (a.loadgen_ticks[1] - a.loadgen_ticks[0]))
        if t1 > t0:
            other = max(0.0, ((b1 - b0) - ours) / (t1 - t0) * 100)
    row = [a.kind, a.target, a.scenario, str(a.rep), str(n), f"{res['rps']:.1f}",
           f"{res['p50_us']:.0f}", f"{res['p99_us']:.0f}", f"{cpu:.2f}", f"{ocpu:.2f}",
           f"{user:.2f}", f"{sys_:.2f}", str(res["errors"]), res["detail"], f"{other:.1f}"]
    with open(a.results, "a") as f:
        f.write("\t".join(row) + "\n")
    cpu_s = "-" if cpu != cpu else f"{cpu:.1f} µs/req"
    if cpu == cpu and user == user:
        cpu_s += f" ({user:.1f} user + {sys_:.1f} sys)"
    print(f"[bench] {a.kind:7} {a.scenario:18} #{a.rep} {a.target:11} {res['rps']:>10.0f} req/s"
          f"  p50 {res['p50_us']:>6.0f} µs  p99 {res['p99_us']:>6.0f} µs  cpu {cpu_s}"
          f"  errors {res['errors']}" + ("" if other != other else f"  other-load {other:.0f}%"),
          file=sys.stderr)
    return 0


# ------------------------------------------------------------------- tables --
def fnum(x: float, digits: int = 0) -> str:
    if x is None or x != x:
        return "–"
    return f"{x:,.{digits}f}"


def ratio(a: float, b: float) -> str:
    if not a or not b or a != a or b != b:
        return "–"
    return f"{a / b:.2f}"


def med(vals):
    vals = [v for v in vals if v == v]
    return statistics.median(vals) if vals else float("nan")


def md_table(header: list, rows: list, left: int = 2) -> str:
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" if i < left else "---:" for i in range(len(header))) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def cmd_table(a) -> int:
    meta = OrderedDict()
    skipped = []
    with open(a.meta) as f:
        for line in f:
            line = line.rstrip("\n")
            if "=" in line:
                k, v = line.split("=", 1)
                if k == "skipped":
                    skipped.append(v)
                else:
                    meta[k] = v
    rows = []
    with open(a.results) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) == len(COLUMNS):
                rows.append(dict(zip(COLUMNS, parts)))

    out = []
    out.append(f"Run {meta.get('date', '?')} — `{meta.get('command', '')}`  ")
    out.append(f"{meta.get('cpus', '?')} × {meta.get('cpu_model', '?')}, {meta.get('kernel', '?')}; "
               f"nginx {meta.get('nginx', '?')}, HAProxy {meta.get('haproxy', '?')}, "
               f"wrk {meta.get('wrk', '?')}, {meta.get('h2load', 'h2load ?')}; "
               f"git {meta.get('git', '?')}  ")
    out.append(f"{meta.get('pinning', '')}; {meta.get('repeat', '?')} repeat(s) × "
               f"{meta.get('duration', '?')} s per point, medians; load average at start "
               f"{meta.get('loadavg_start', '?')}, at end {meta.get('loadavg_end', '?')}; "
               f"took {meta.get('elapsed_s', '?')} s"
               + (f"; waited up to {meta['wait_quiet']} s for a quiet machine before each "
                  f"repeat of a point" if meta.get("wait_quiet", "0") != "0" else "")
               + (f"; a run during which other processes used more than "
                  f"{meta['retry_noisy']} % of the machine was redone (at most twice, the "
                  f"least noisy try kept): {meta.get('noisy_redone', '?')} redone"
                  if meta.get("retry_noisy") else "") + ".")
    for s in skipped:
        out.append(f"\n**Skipped:** {s}")

    matrix = [r for r in rows if r["kind"] == "matrix"]
    if matrix:
        groups = defaultdict(list)
        scenarios = []
        for r in matrix:
            if r["scenario"] not in scenarios:
                scenarios.append(r["scenario"])
            groups[(r["scenario"], r["target"])].append(r)
        targets = [t for t in TARGET_ORDER if any(k[1] == t for k in groups)]
        agg = {}
        for key, rs in groups.items():
            rps = [float(r["rps"]) for r in rs]
            m = med(rps)
            agg[key] = {
                "rps": m,
                "spread": (max(rps) - min(rps)) / m * 100 if m else float("nan"),
                "p50": med([float(r["p50_us"]) for r in rs]),
                "p99": med([float(r["p99_us"]) for r in rs]),
                "cpu": med([float(r["cpu_us_req"]) for r in rs]),
                "ocpu": med([float(r["origin_cpu_us_req"]) for r in rs]),
                "user": med([float(r["user_us_req"]) for r in rs]),
                "sys": med([float(r["sys_us_req"]) for r in rs]),
                "other": med([float(r["other_cpu_pct"]) for r in rs]),
                "errors": sum(max(0, int(r["errors"])) for r in rs),
                "failed": sum(1 for r in rs if int(r["errors"]) < 0),
                "n": len(rs),
            }
        trs = []
        for sc in scenarios:
            for t in targets:
                g = agg.get((sc, t))
                if not g:
                    continue
                d = agg.get((sc, "direct"), {})
                ng = agg.get((sc, "nginx"), {})
                hp = agg.get((sc, "haproxy"), {})
                add = (g["p50"] - d["p50"]) if d and t != "direct" else float("nan")
                cpu = (f"({fnum(g['ocpu'], 1)} origin)" if t == "direct" else fnum(g["cpu"], 1))
                err = str(g["errors"]) + (f" ({g['failed']} runs failed)" if g["failed"] else "")
                trs.append([t, sc, fnum(g["rps"]), f"±{g['spread'] / 2:.0f}%" if g["n"] > 1 else "–",
                            fnum(g["p50"]), fnum(g["p99"]),
                            ("+" if add >= 0 else "") + fnum(add) if add == add else "–",
                            cpu,
                            ratio(g["rps"], d.get("rps")) if t != "direct" else "–",
                            ratio(g["rps"], ng.get("rps")) if t != "nginx" else "–",
                            ratio(g["rps"], hp.get("rps")) if t != "haproxy" else "–",
                            err, fnum(g["other"]) + "%"])
        out.append("\n### Throughput and latency (medians across repeats)\n")
        out.append(md_table(["target", "scenario", "req/s", "spread", "p50 µs", "p99 µs",
                             "p50 over direct µs", "proxy CPU µs/req", "req/s ÷ direct",
                             "÷ nginx", "÷ haproxy", "errors", "other load"], trs))
        out.append("\n`spread` is half the min–max range of req/s across repeats, as a share of "
                   "the median. `req/s ÷ X` is this row's median req/s over X's in the same "
                   "scenario. The direct row's CPU figure is the origin nginx's own CPU per "
                   "request, for scale. `other load` is the share of the whole machine's CPU "
                   "(both cores) used during the run by processes outside the benchmark "
                   "(from /proc/stat, minus the proxy's, the origins' and the load generator's "
                   "own time); high values mean the run competed with other work.")

        ptargets = [t for t in PROXIES if t in targets]
        if ptargets:
            hdr = ["scenario"] + [f"{t}" for t in ptargets]
            # Ratios for each hopgate build in the run (the default build,
            # and the profile-guided one when it ran).
            mine = [t for t in ("hopgate", "hopgate-pgo") if t in ptargets]
            extra = [t for t in ("nginx", "haproxy") if t in ptargets] if mine else []
            for m in mine:
                hdr += [f"{m} user ÷ {t}" for t in extra]
                hdr += [f"{m} total ÷ {t}" for t in extra]
                if "floor" in ptargets:
                    hdr += [f"{m} − floor, total"]
            crs = []
            for sc in scenarios:
                row = [sc]
                for t in ptargets:
                    g = agg.get((sc, t))
                    row.append(f"{fnum(g['user'], 1)} + {fnum(g['sys'], 1)} = {fnum(g['cpu'], 1)}"
                               if g else "–")
                for m in mine:
                    h = agg.get((sc, m))
                    for key in ("user", "cpu"):
                        for t in extra:
                            o = agg.get((sc, t))
                            row.append(ratio(h[key], o[key]) if h and o else "–")
                    if "floor" in ptargets:
                        f = agg.get((sc, "floor"))
                        row.append(fnum(h["cpu"] - f["cpu"], 1) if h and f else "–")
                crs.append(row)
            out.append("\n### Proxy CPU time per request, µs: user + system = total (all the "
                       "proxy's processes; medians)\n")
            out.append(md_table(hdr, crs, left=1))
            out.append("\nFrom `utime` and `stime` in `/proc/<pid>/stat` of every process of the "
                       "proxy (master and workers; all threads), before and after each run, "
                       "÷ completed requests. Each part is the median of its own, so user + "
                       "system can differ from the total's median by a little.")
            notes = [f"`{t}`: {TARGET_NOTES[t]}" for t in ptargets if t in TARGET_NOTES]
            if notes:
                out.append("; ".join(notes) + ".")

        # The shared core's time per request, and what 1.2x nginx leaves
        # the proxy: proxy and origins share one CPU, so 1 / req/s is the
        # proxy's CPU + the origins' + the rest (other work, idle).
        if "nginx" in targets:
            brs = []
            for sc in scenarios:
                ng = agg.get((sc, "nginx"))
                if not ng or not sc.startswith("h1") or sc.endswith(" c1"):
                    continue
                want = 1e6 / (1.2 * ng["rps"])
                for t in ptargets:
                    g = agg.get((sc, t))
                    if not g or not g["rps"]:
                        continue
                    core = 1e6 / g["rps"]
                    rest = core - g["cpu"] - g["ocpu"]
                    budget = want - g["ocpu"] - rest
                    brs.append([sc, t, fnum(core, 1), fnum(g["cpu"], 1), fnum(g["ocpu"], 1),
                                fnum(rest, 1), fnum(want, 1), fnum(budget, 1),
                                ("+" if g["cpu"] >= budget else "") + fnum(g["cpu"] - budget, 1)])
            if brs:
                out.append("\n### The shared core per request, and the proxy's budget at 1.2× "
                           "nginx (µs)\n")
                out.append(md_table(["scenario", "target", "core per request", "proxy CPU",
                                     "origins' CPU", "rest", "core per request at 1.2× nginx",
                                     "proxy budget there", "proxy over budget"], brs, left=2))
                out.append("\nThe proxy and the origins share one CPU, so each request takes "
                           "1 ÷ req/s of it: the proxy's CPU, the origins' CPU for that "
                           "request, and the rest (other work, idle). At 1.2× nginx's req/s "
                           "a request may take 1 ÷ (1.2 × nginx's req/s); with the origins' "
                           "CPU and the rest as they are behind that target, the proxy may "
                           "spend what is left (its budget). A floor row over its budget "
                           "means that not even a forward that parses nothing gets there.")

        base_builds = [t for t in ("hopgate", "hopgate-pgo") if t in targets]
        if "hopgate-base" in targets and base_builds:
            brs = []
            for sc in scenarios:
                b = agg.get((sc, "hopgate-base"))
                if not b:
                    continue
                row = [sc, fnum(b["rps"]), fnum(b["cpu"], 1)]
                for t in base_builds:
                    g = agg.get((sc, t))
                    row += [fnum(g["rps"]) if g else "–",
                            ratio(g["rps"], b["rps"]) if g else "–",
                            ratio(g["cpu"], b["cpu"]) if g else "–"]
                brs.append(row)
            hdr = ["scenario", "base req/s", "base CPU µs/req"]
            for t in base_builds:
                hdr += [f"{t} req/s", f"{t} ÷ base", f"{t} CPU ÷ base"]
            out.append("\n### Against the base build (same interleaved run)\n")
            out.append(md_table(hdr, brs, left=1))
            out.append(f"\nBase build: {meta.get('hopgate_base', '?')}. `÷ base` is the median "
                       "req/s over the base build's; `CPU ÷ base` the proxy CPU per request "
                       "over the base build's (below 1 is cheaper).")

        if "hopgate" in targets and "hopgate-log" in targets:
            lrs = []
            for sc in scenarios:
                off, on = agg.get((sc, "hopgate")), agg.get((sc, "hopgate-log"))
                if not (off and on):
                    continue
                cost = (1 - on["rps"] / off["rps"]) * 100 if off["rps"] else float("nan")
                lrs.append([sc, fnum(off["rps"]), fnum(on["rps"]), f"{cost:+.1f}%".replace("+-", "−"),
                            fnum(off["user"], 1), fnum(on["user"], 1),
                            fnum(off["cpu"], 1), fnum(on["cpu"], 1)])
            out.append("\n### Access log on vs off (hopgate, same interleaved run)\n")
            out.append(md_table(["scenario", "req/s off", "req/s on", "throughput cost",
                                 "user µs/req off", "user µs/req on", "total µs/req off",
                                 "total µs/req on"], lrs, left=1))
            out.append("\n`throughput cost` is 1 − (req/s on ÷ req/s off) of the medians; "
                       "negative means the run with the log was faster (noise).")

    restart = [r for r in rows if r["kind"] == "restart"]
    if restart:
        rrs = []
        for t in PROXIES:
            for r in restart:
                if r["target"] != t:
                    continue
                n, e = int(r["requests"]), int(r["errors"])
                rate = f"{e / n * 100:.3f}%" if n and e >= 0 else "–"
                rrs.append([t, "rolling restart, 3 origins", fnum(float(n)), fnum(float(r["rps"])),
                            str(e) if e >= 0 else "run failed", rate, r["detail"]])
        out.append("\n### Rolling restart of all origins under load (wrk, 16 connections)\n")
        out.append(md_table(["proxy", "scenario", "requests", "req/s", "client-visible errors",
                             "error rate", "breakdown"], rrs).replace("---:|\n", "---|\n", 1))

    text = "\n".join(out) + "\n"
    print(text)
    if a.md:
        with open(a.md, "w") as f:
            f.write("# hopgate load benchmark — latest run\n\n" + text)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--results", required=True)
    r.add_argument("--kind", required=True, choices=["matrix", "restart"])
    r.add_argument("--target", required=True)
    r.add_argument("--scenario", required=True)
    r.add_argument("--rep", type=int, default=1)
    r.add_argument("--tool", required=True, choices=["wrk", "h2load"])
    r.add_argument("--output", required=True)
    r.add_argument("--h2log")
    r.add_argument("--ticks", type=int, nargs=2, required=True)
    r.add_argument("--user-sys-ticks", type=int, nargs=4,
                   help="utime0 stime0 utime1 stime1 of the proxy's processes")
    r.add_argument("--origin-ticks", type=int, nargs=2, required=True)
    r.add_argument("--clk", type=int, required=True)
    r.add_argument("--no-proxy", action="store_true")
    r.add_argument("--sys-ticks", type=int, nargs=4, help="busy0 total0 busy1 total1 from /proc/stat")
    r.add_argument("--loadgen-ticks", type=int, nargs=2)
    t = sub.add_parser("table")
    t.add_argument("--results", required=True)
    t.add_argument("--meta", required=True)
    t.add_argument("--md")
    a = p.parse_args()
    return cmd_record(a) if a.cmd == "record" else cmd_table(a)


if __name__ == "__main__":
    sys.exit(main())
