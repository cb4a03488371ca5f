"""The helpers the project's Python scripts share (scripts/*.py, scripts/lib/, scripts/chart/):
messages, failure, running a tool for its output, polling, the processes a check starts, and
counted checks. The Python side of scripts/lib/common.sh, with the same stdout contract: a
tool's stdout is the value it hands back, its progress goes to stderr, and `run` lets that
stderr through to the user instead of mixing it into the value.

    sys.path.insert(0, os.path.join(HERE, "lib"))   # or HERE itself, from scripts/lib/
    import common
    log = common.logger("check-dashboards")
"""

import glob
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request


class Failed(Exception):
    """A check did not hold, or a tool it needs failed: the script's one way to stop."""


def logger(name):
    """log(msg) for the script `name`: one line on stderr, prefixed with the name."""

    def log(msg):
        print(f"{name}: {msg}", file=sys.stderr, flush=True)

    return log


def main_guard(name, main, argv=None):
    """Runs main(argv) and exits with its code; a Failed ends in `NAME: FAILED: why`, exit 1."""
    try:
        sys.exit(main(sys.argv[1:] if argv is None else argv))
    except Failed as e:
        print(f"{name}: FAILED: {e}", file=sys.stderr, flush=True)
        sys.exit(1)


def run(argv, what, env=None, timeout=600, stdin=None):
    """The stdout of `argv`, which must exit 0. Its stderr (an installer's progress, a build's
    output) goes straight to ours, so it is seen as it happens and never taken for the value."""
    r = subprocess.run(argv, env=env, input=stdin, stdout=subprocess.PIPE, text=True, timeout=timeout)
    if r.returncode != 0:
        raise Failed(f"{what}: exit {r.returncode} (its output is above){tail_text(r.stdout)}")
    return r.stdout


def tail_text(text, n=25):
    lines = text.splitlines()[-n:]
    return "".join(f"\n    {line}" for line in lines)


def tail(path, n=25):
    """The last lines of a log, as a paragraph for an error message ('' without the file)."""
    if not path or not os.path.exists(path):
        return ""
    with open(path, errors="replace") as f:
        lines = f.readlines()[-n:]
    return f"\n--- last lines of {path}:\n" + "".join("    " + line for line in lines)


def wait_until(what, pred, timeout, proc=None, log_path=None, interval=0.2):
    """Polls pred() until it is true. Raises Failed naming `what` when `timeout` seconds pass, or
    when `proc` (the process that should make pred true) exits first, with its log's tail."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        if proc is not None and proc.poll() is not None:
            raise Failed(f"{what}: the process exited ({proc.returncode}){tail(log_path)}")
        time.sleep(interval)
    raise Failed(f"{what}: not after {timeout}s{tail(log_path)}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_status(url, timeout=2):
    """The HTTP status of a GET of url, None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


class Processes:
    """What a check started, stopped in reverse order, each by its own pid."""

    def __init__(self, log=None):
        self.procs = []
        self.log = log or logger("processes")

    def start(self, name, argv, log_path, env=None, stderr_pipe=False):
        out = open(log_path, "ab")
        p = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.PIPE if stderr_pipe else subprocess.STDOUT,
            env=env,
        )
        out.close()
        self.procs.append((name, p))
        return p

    def stop_all(self):
        for name, p in reversed(self.procs):
            if p.poll() is None:
                # A process stopped early (a failed check) may not stop what it started (wsload
                # run's managed server): note its children first, stop them after it.
                children = child_pids(p.pid)
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    self.log(f"{name} (pid {p.pid}) ignored SIGTERM for 15s; killing it")
                    p.kill()
                    p.wait()
                for pid, cmdline in children:
                    try:
                        with open(f"/proc/{pid}/cmdline", "rb") as f:
                            same = f.read() == cmdline
                        if same:
                            os.kill(pid, signal.SIGTERM)
                    except OSError:
                        pass


def child_pids(pid):
    """(pid, cmdline) of `pid`'s children now; the command line tells a reused pid later."""
    out = []
    for children in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            with open(children) as f:
                for c in f.read().split():
                    with open(f"/proc/{c}/cmdline", "rb") as cf:
                        out.append((int(c), cf.read()))
        except OSError:
            pass
    return out


class Checks:
    """Counted, non-fatal checks: each one judged and remembered, the verdict at the end."""

    def __init__(self):
        self.passed = 0
        self.failures = []

    def check(self, ok, what):
        if ok:
            self.passed += 1
        else:
            self.failures.append(what)
        return ok


def kubectl(binary, env, *args, stdin=None):
    """The stdout of `binary args...` (a kubectl; env carries KUBECONFIG), which must succeed."""
    return run([binary, *args], "kubectl " + " ".join(args), env=env, timeout=60, stdin=stdin)


def load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def crd_established(binary, env, name):
    """The CustomResourceDefinition `name` is Established (for wait_until). Polled, not `kubectl
    wait`; and before the API server sets the CRD's first condition kubectl's jsonpath fails
    (`<nil> is not array`), which means 'not yet', quietly."""
    r = subprocess.run([binary, "get", f"crd/{name}", "-o",
                        'jsonpath={.status.conditions[?(@.type=="Established")].status}'],
                       env=env, capture_output=True, text=True, timeout=60)
    return r.returncode == 0 and r.stdout == "True"


def managed_metrics_addr(line):
    """HOST:PORT of the first managed server's metrics in a line of `wsload run`'s stderr, else
    None. The line is crates/wsload-contract's announce::managed_servers; the load generator's
    tests check this reader against a real run's line."""
    m = re.match(r"managed wsload-server.*, metrics on http://([^/\s]+)/metrics", line)
    return m.group(1) if m else None
