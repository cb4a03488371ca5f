#!/usr/bin/env python3
"""Reads the runs of bench/loadgen/run.sh and prints the wsload vs k6 markdown report.

Each run directory holds `meta` (key=value lines written by run.sh), `time` (/usr/bin/time:
wall, user, sys seconds, peak RSS KiB), `samples` (unix-seconds and utime+stime ticks of the
client process every 50 ms), and the tool's own result: wsload's `result.json` (`wsload run
--out`), k6's `summary.json` (handleSummary) or, for k6 throughput, the `WSLOAD_BENCH {...}`
lines its VUs print.
"""

import argparse
import json
import math
import os
import re
import statistics
import sys


def read_meta(d):
    meta = {}
    try:
        with open(os.path.join(d, "meta")) as f:
            for line in f:
                k, _, v = line.rstrip("\n").partition("=")
                meta[k] = v
    except OSError:
        pass
    return meta


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_time(d):
    """(wall, cpu seconds, peak RSS KiB) of the whole process, or Nones."""
    try:
        with open(os.path.join(d, "time")) as f:
            lines = [ln.split() for ln in f if re.match(r"^[0-9.]+ [0-9.]+ [0-9.]+ [0-9]+$", ln.strip())]
    except OSError:
        return None, None, None
    if not lines:
        return None, None, None
    wall, user, system, rss = lines[-1]
    return float(wall), float(user) + float(system), int(rss)


def read_samples(d, clk_tck):
    out = []
    try:
        with open(os.path.join(d, "samples")) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2:
                    out.append((float(parts[0]), int(parts[1]) / clk_tck))
    except OSError:
        pass
    return out


def cpu_at(samples, t):
    """CPU seconds the process had used at unix time t (linear between samples)."""
    if not samples:
        return None
    if t <= samples[0][0]:
        return samples[0][1]
    if t >= samples[-1][0]:
        return samples[-1][1]
    lo, hi = 0, len(samples) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if samples[mid][0] <= t:
            lo = mid
        else:
            hi = mid
    (t0, c0), (t1, c1) = samples[lo], samples[hi]
    return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else c0


def cpu_between(samples, a, b):
    """CPU seconds used in [a, b]; None unless samples cover the window."""
    if not samples or a is None or b is None or b <= a:
        return None
    if samples[0][0] > a + 0.2 or samples[-1][0] < b - 0.2:
        return None
    return cpu_at(samples, b) - cpu_at(samples, a)


def per(n, d):
    return n / d if n is not None and d else None


def bench_lines(d):
    rows = []
    for name in ("stderr", "stdout"):
        try:
            with open(os.path.join(d, name), errors="replace") as f:
                for line in f:
                    i = line.find("WSLOAD_BENCH ")
                    if i >= 0:
                        try:
                            rows.append(json.loads(line[i + len("WSLOAD_BENCH "):].strip()))
                        except ValueError:
                            pass
        except OSError:
            pass
    return rows


def k6_metric(summary, name, stat):
    try:
        return summary["metrics"][name]["values"][stat]
    except (KeyError, TypeError):
        return None


def wsload_cell(d):
    r = read_json(os.path.join(d, "result.json"))
    if not r or not r.get("cells"):
        return None, None
    return r, r["cells"][0]


def failed_total(cell):
    return sum(cell["counts"].get("failed", {}).values())


def dropped_total(cell):
    return sum(cell["counts"].get("dropped", {}).values())


PCTS = [("p50", "p50", "med"), ("p90", "p90", "p(90)"), ("p99", "p99", "p(99)"),
        ("p99.9", "p999", "p(99.9)"), ("max", "max", "max")]


def analyze(d, meta, clk_tck):
    """The figures of one run (a dict), with `problem` set when something went wrong."""
    test, tool = meta.get("test", ""), meta.get("tool", "")
    wall, cpu_total, peak_rss = read_time(d)
    samples = read_samples(d, clk_tck)
    f = {"test": test, "tool": tool, "cpu_total": cpu_total, "wall": wall, "peak_rss_kib": peak_rss}
    problems = []
    if test.startswith("throughput"):
        if tool == "wsload":
            r, c = wsload_cell(d)
            if c is None:
                return dict(f, problem="no result.json")
            start = r["startedAtUnixMs"] / 1000 + 0.005 + c["connectSecs"] + float(meta.get("warmup", 0))
            end = start + c["measuredSecs"]
            echoes = c["counts"]["received"]
            f.update(rate=c["figures"]["receivedPerSec"], window=c["measuredSecs"], echoes=echoes,
                     connections=c["counts"]["connected"], delivery=c["figures"].get("delivery"))
            errs = failed_total(c) + dropped_total(c)
        else:
            rows = bench_lines(d)
            start = int(meta["win_start_ms"]) / 1000
            end = int(meta["win_end_ms"]) / 1000
            echoes = sum(x.get("window", 0) for x in rows)
            f.update(rate=echoes / (end - start), window=end - start, echoes=echoes,
                     connections=len(rows))
            errs = sum(1 for x in rows if x.get("error"))
            if len(rows) < 100:
                problems.append(f"{len(rows)} of 100 VUs reported")
        cpu = cpu_between(samples, start, end)
        f.update(cpu=cpu, per_cpu=per(echoes, cpu), cores=per(cpu, end - start), errors=errs)
        if errs:
            problems.append(f"{errs} connection errors")
    elif test.startswith("ping"):
        if tool == "wsload":
            r, c = wsload_cell(d)
            if c is None:
                return dict(f, problem="no result.json")
            rtt = c["figures"]["rtt"]
            start = r["startedAtUnixMs"] / 1000 + 0.005 + c["connectSecs"]
            end = start + c["measuredSecs"]
            n = rtt["count"]
            f.update({k: rtt[w] * 1e3 for k, w, _ in PCTS})
            f["mean"] = rtt["mean"] * 1e3
            f.update(pings=n, rate=per(n, c["measuredSecs"]))
            errs = failed_total(c) + dropped_total(c) + c["counts"].get("lost", 0)
        else:
            s = read_json(os.path.join(d, "summary.json"))
            if not s:
                return dict(f, problem="no summary.json")
            n = k6_metric(s, "pings", "count") or 0
            first = k6_metric(s, "ping_first_unix_ms", "min")
            last = k6_metric(s, "ping_last_unix_ms", "max")
            start, end = (first / 1000, last / 1000) if first and last else (None, None)
            f.update({k: k6_metric(s, "rtt", w) for k, _, w in PCTS})
            f["mean"] = k6_metric(s, "rtt", "avg")
            f.update(pings=n, rate=per(n, (end - start) if start else None))
            errs = k6_metric(s, "errors", "count") or 0
        cpu = cpu_between(samples, start, end)
        f.update(cpu=cpu, per_cpu=per(f["pings"], cpu), errors=errs,
                 window=(end - start) if start is not None and end is not None else None)
        if errs:
            problems.append(f"{errs} errors or lost pings")
    elif test == "storm":
        want = int(meta.get("connections", 0))
        if tool == "wsload":
            r, c = wsload_cell(d)
            if c is None:
                return dict(f, problem="no result.json")
            conn = c["figures"]["connect"]
            f.update({k: conn[w] * 1e3 for k, w, _ in PCTS})
            opened = c["counts"]["connected"]
            f.update(opened=opened, rate=c["figures"]["connectRate"], window=c["connectSecs"])
        else:
            s = read_json(os.path.join(d, "summary.json"))
            if not s:
                return dict(f, problem="no summary.json")
            opened = k6_metric(s, "opened", "count") or 0
            first = k6_metric(s, "dial_start_unix_ms", "min")
            last = k6_metric(s, "opened_unix_ms", "max")
            window = (last - first) / 1000 if first and last else None
            f.update({k: k6_metric(s, "ws_connecting", w) for k, _, w in PCTS})
            f.update(opened=opened, rate=per(opened, window), window=window)
        f.update(errors=want - f["opened"], cpu=cpu_total, per_cpu=per(f["opened"], cpu_total))
        if f["errors"]:
            problems.append(f"{f['errors']} of {want} connections failed")
    if problems:
        f["problem"] = "; ".join(problems)
    return f


def median(values):
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return statistics.median(vals) if vals else None


def num(v):
    if v is None:
        return "n/a"
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.2f}M"
    if a >= 1e4:
        return f"{v / 1e3:.1f}K"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def ms(v):
    if v is None:
        return "n/a"
    if v < 1:
        return f"{v * 1e3:.0f} us"
    if v < 1000:
        return f"{v:.2f} ms"
    return f"{v / 1e3:.2f} s"


def ratio(a, b):
    return a / b if a is not None and b else None


def fmt_ratio(r):
    if r is None:
        return "n/a"
    return f"{r:.1f}x" if r >= 10 else f"{r:.2f}x"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs")
    ap.add_argument("--clk-tck", type=int, default=100)
    ap.add_argument("--cores", default="?")
    ap.add_argument("--repeat", default="?")
    ap.add_argument("--versions", default="")
    ap.add_argument("--load", nargs=2, default=["?", "?"])
    ap.add_argument("--seconds", default="?")
    a = ap.parse_args()

    runs = []
    hold = {}
    for name in sorted(os.listdir(a.runs)):
        d = os.path.join(a.runs, name)
        if not os.path.isdir(d):
            continue
        meta = read_meta(d)
        if name.startswith("hold"):
            hold[name] = (meta, read_json(os.path.join(d, "result.json")), read_time(d))
            continue
        f = analyze(d, meta, a.clk_tck)
        f["run"] = name
        runs.append(f)

    def med(test, tool, key):
        return median([r.get(key) for r in runs if r["test"] == test and r["tool"] == tool])

    rows = []  # (test, figure, wsload, k6, ratio, target, met)
    verdicts = []

    def add(test_label, figure, test, key, fmt, target=None, lower_better=False):
        w, k = med(test, "wsload", key), med(test, "k6", key)
        r = ratio(w, k)
        met = ""
        # WSLOAD_BENCH_K6=0 runs wsload alone: no ratio, so no verdict either.
        k6_ran = any(x["test"] == test and x["tool"] == "k6" for x in runs)
        if target is not None and not k6_ran:
            met = "n/a (k6 not run)"
        elif target is not None:
            ok = r is not None and r >= target
            met = "**yes**" if ok else "**NO**"
            verdicts.append((f"{test_label}: {figure}", f"wsload/k6 >= {target:g}x", fmt_ratio(r), ok))
        rows.append((test_label, figure + (" (lower is better)" if lower_better else ""),
                     fmt(w), fmt(k), fmt_ratio(r), f">= {target:g}x" if target else "", met))

    present = {r["test"] for r in runs}
    for size in ("64", "1024"):
        test = f"throughput-{size}"
        if test not in present:
            continue
        label = f"Throughput {'64 B' if size == '64' else '1 KiB'}, 100 conns"
        add(label, "echoes/s", test, "rate", num)
        add(label, "echoes per client CPU-s", test, "per_cpu", num, target=20)
        add(label, "client CPU used (cores)", test, "cores", lambda v: "n/a" if v is None else f"{v:.2f}")
    if "throughput-template" in present:
        label = "Template vs built-in echo, 64 B, 100 conns (wsload alone)"
        builtin = med("throughput-64b", "wsload", "per_cpu")
        own = med("throughput-template", "wsload", "per_cpu")
        r = ratio(own, builtin)
        ok = r is not None and r >= 0.9
        verdicts.append((f"{label}: echoes per client CPU-s, template / built-in", ">= 0.9x", fmt_ratio(r), ok))
        rows.append((label, "echoes/s, built-in / template",
                     f"{num(med('throughput-64b', 'wsload', 'rate'))} / {num(med('throughput-template', 'wsload', 'rate'))}",
                     "-", "", "", ""))
        rows.append((label, "echoes per client CPU-s, built-in / template (ratio in the ratio column)",
                     f"{num(builtin)} / {num(own)}", "-", fmt_ratio(r), ">= 0.9x",
                     "**yes**" if ok else "**NO**"))
    if "throughput-64b-baseline" in present:
        # The echo path before (an earlier wsload binary, same load, alternating): what "today's
        # echo path" was, against the built-in echo conversation and the user's template now.
        label = "Against the echo path before (WSLOAD_BENCH_BASELINE_BIN), 64 B, 100 conns"
        before = med("throughput-64b-baseline", "wsload", "per_cpu")
        for test, what in (("throughput-64b", "built-in echo conversation"),
                           ("throughput-template", "template")):
            if test not in present:
                continue
            now = med(test, "wsload", "per_cpu")
            r = ratio(now, before)
            ok = r is not None and r >= 0.9
            verdicts.append((f"{label}: echoes per client CPU-s, {what} / before", ">= 0.9x",
                             fmt_ratio(r), ok))
            rows.append((label, f"echoes per client CPU-s, before / {what} (ratio in the ratio column)",
                         f"{num(before)} / {num(now)}", "-", fmt_ratio(r), ">= 0.9x",
                         "**yes**" if ok else "**NO**"))
    for conns in ("1", "100"):
        test = f"ping-{conns}"
        if test not in present:
            continue
        label = f"Ping, {conns} conn{'s' if conns != '1' else ''}"
        add(label, "round trips/s", test, "rate", num)
        for k, _, _ in PCTS:
            add(label, f"RTT {k}", test, k, ms, lower_better=True)
        add(label, "round trips per client CPU-s", test, "per_cpu", num)
    if "storm" in present:
        label = "Storm, 5,000 conns"
        add(label, "connections/s", "storm", "rate", num, target=3)
        for k, _, _ in PCTS:
            add(label, f"connect {k}", "storm", k, ms, lower_better=True)
        add(label, "connections per client CPU-s (open+close, whole process)", "storm", "per_cpu", num)
        add(label, "failed connections", "storm", "errors", lambda v: "n/a" if v is None else f"{v:.0f}")

    hold_lines = []
    if "hold" in hold:
        meta, result, (_, _, peak) = hold["hold"]
        base_meta = hold.get("hold-baseline", ({}, None, (None, None, None)))[0]
        n = int(meta.get("open_connections") or 0)
        want = int(meta.get("connections") or 0)
        rss_open = int(meta.get("rss_open_kib") or 0)
        rss_ping = int(meta.get("rss_after_ping_kib") or 0) or None
        rss_base = int(base_meta.get("rss_open_kib") or 0)
        per_conn = (rss_open - rss_base) / (n - 1) if n > 1 and rss_open else None
        per_ping = (rss_ping - rss_base) / (n - 1) if n > 1 and rss_ping else None
        label = f"Hold, {want:,} idle conns"
        # Judged once the first ping round has run: until a worker allocates again, mimalloc
        # has not returned the handshakes' freed buffers to the system, and RSS counts them.
        ok = per_ping is not None and per_ping <= 4 and n == want
        verdicts.append((f"{label}: wsload KiB per idle connection (steady, after the first ping round)", "<= 4 KiB",
                         "n/a" if per_ping is None else f"{per_ping:.1f} KiB", ok))
        rows.append((label, "wsload KiB per idle connection, steady ((VmRSS after the first ping round - VmRSS at 1 conn) / N)",
                     "n/a" if per_ping is None else f"{per_ping:.1f}", "-", "", "<= 4 KiB",
                     "**yes**" if ok else "**NO**"))
        rows.append((label, "... right when all are open",
                     "n/a" if per_conn is None else f"{per_conn:.1f}", "-", "", "", ""))
        rows.append((label, "wsload VmRSS: 1 conn / all open / after pings / peak (MiB)",
                     f"{rss_base / 1024:.0f} / {rss_open / 1024:.0f} / "
                     f"{(rss_ping or 0) / 1024:.0f} / {(peak or 0) / 1024:.0f}", "-", "", "", ""))
        surv = result["cells"][0]["figures"]["survival"] if result and result.get("cells") else None
        rows.append((label, "open / survived the hold",
                     f"{n:,} of {want:,} / " + ("n/a" if surv is None else f"{surv * 100:.2f}%"),
                     "-", "", "", ""))
        if meta.get("note"):
            hold_lines.append(meta["note"])

    print(f"\n## wsload vs k6: load-generator benchmark ({a.cores} cores, client and server share them)\n")
    print("| Test | Figure | wsload | k6 | wsload/k6 | Target | Met |")
    print("|---|---|---|---|---|---|---|")
    prev = None
    for t, fig, w, k, r, tgt, met in rows:
        print(f"| {t if t != prev else ''} | {fig} | {w} | {k} | {r} | {tgt} | {met} |")
        prev = t
    print("\nTargets:")
    for what, target, actual, ok in verdicts:
        print(f"- {what}: {actual} (target {target}): {'met' if ok else 'NOT met'}")

    print(f"""
Medians of {a.repeat} runs per tool and cell (the runs alternate which tool goes first).
- The client and the server share the machine's {a.cores} cores, so every rate above is bounded
  by both processes (and by anything else running): the figures of merit are the PER CLIENT
  CPU-SECOND ones, which charge each tool only for the CPU its own process used.
- Client CPU = utime+stime of the client process from /proc/PID/stat (all threads), sampled
  every 50 ms; throughput and ping count it over the measured window only (wsload: its
  measured window after the warm-up, from result.json; k6: the same-length window the script
  gives it, after the same warm-up), so start-up and k6's VU initialisation are not charged.
  The storm charges the whole process (/usr/bin/time), which opens and closes the connections.
- Throughput: 64 messages in flight per connection for both tools (wsload's default window; k6
  sends 64 on open and one per echo), text frames of the same size; echoes/s = echoes received.
  Loopback TCP work shows up partly as client system time, for both tools alike.
- Ping: one message in flight per connection; wsload times round trips with its clock, k6 with
  exec.instance.currentTestRunDuration (ns resolution). Round trips/s = round trips / time from
  the first send to the last echo.
- Storm: wsload opens 5,000 connections in batches of 500 every 10 ms and closes them once all are
  open; k6 runs 5,000 iterations (open, then close) on a shared-iterations executor. Connect
  time: wsload TCP + upgrade; k6 ws_connecting. Rate = connections / (last open - first dial).
- {a.versions}
- Load average (1/5/15 min) before: {a.load[0]}; after: {a.load[1]}. Run time: {a.seconds} s.""")
    for line in hold_lines:
        print(f"- {line}")

    print("\n<details><summary>Every run</summary>\n")
    print("| Run | Rate | Per client CPU-s | Client CPU s | Window s | Errors | Problem |")
    print("|---|---|---|---|---|---|---|")
    def secs(v):
        return "n/a" if v is None else f"{v:.2f}"

    for r in runs:
        print(f"| {r['run']} | {num(r.get('rate'))} | {num(r.get('per_cpu'))} | "
              f"{secs(r.get('cpu'))} | {secs(r.get('window'))} | "
              f"{r.get('errors', 'n/a')} | {r.get('problem', '')} |")
    print("\n</details>")
    bad = [r for r in runs if r.get("problem")]
    if bad:
        print("\nWarnings:")
        for r in bad:
            print(f"- {r['run']}: {r['problem']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
