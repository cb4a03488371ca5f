"""CPU time of the load generator and of the server over a run's measured window, for run.sh's
"deliveries per client CPU-second".

usage: python3 cpu.py sample OUT CLIENT_PID [SERVER_PID]
           every 0.2 s until CLIENT_PID ends, a line `UNIX_SECONDS CLIENT_CPU SERVER_CPU` in OUT:
           the user + system seconds so far of CLIENT_PID and its descendants (a `wsload run`
           and the shards it starts), and of SERVER_PID and its descendants plus any
           `wsload-server` among the client's (a managed server is `wsload run`'s child, and is
           counted as the server's, not the client's)
       python3 cpu.py window OUT FROM TO
           -> {"client": CPU_SECONDS, "server": CPU_SECONDS} spent between the Unix instants
           FROM and TO, interpolated between the samples around them (null when the samples do
           not cover the window)

The window's CPU, not the whole run's: connecting 10,000 subscribers, the drain and the
report cost CPU that no delivery of the window was read with.
"""
import json
import os
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")
EVERY = 0.2


def processes():
    """{pid: (ppid, comm, cpu seconds)} of every process readable now."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        rest = stat[stat.rindex(")") + 2 :].split()
        out[int(name)] = (int(rest[1]), comm, (int(rest[11]) + int(rest[12])) / TICK)
    return out


def tree(procs, root):
    """root and its descendants."""
    children = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    seen, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in procs:
            seen.append(pid)
            todo.extend(children.get(pid, []))
    return seen


def sample(out, client, server):
    with open(out, "w") as f:
        while os.path.exists(f"/proc/{client}"):
            procs = processes()
            c = s = 0.0
            for pid in tree(procs, client):
                _, comm, cpu = procs[pid]
                if comm == "wsload-server":
                    s += cpu
                else:
                    c += cpu
            if server:
                s += sum(procs[pid][2] for pid in tree(procs, server))
            f.write(f"{time.time():.3f} {c:.3f} {s:.3f}\n")
            f.flush()
            time.sleep(EVERY)


def at(samples, t, column):
    """The CPU reading of `column` at instant t, linear between the samples around it."""
    for (t0, *a), (t1, *b) in zip(samples, samples[1:]):
        if t0 <= t <= t1:
            x = (t - t0) / (t1 - t0) if t1 > t0 else 0.0
            return a[column] + (b[column] - a[column]) * x
    return None


def window(out, start, end):
    samples = [tuple(map(float, l.split())) for l in open(out) if l.strip()]
    result = {}
    for column, name in enumerate(["client", "server"]):
        a, b = at(samples, start, column), at(samples, end, column)
        result[name] = None if a is None or b is None else round(b - a, 3)
    return result


if __name__ == "__main__":
    if sys.argv[1] == "sample":
        sample(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 0)
    else:
        print(json.dumps(window(sys.argv[2], float(sys.argv[3]), float(sys.argv[4]))))
