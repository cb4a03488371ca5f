#!/usr/bin/env python3
"""Runs the workspace's tests as `cargo test --workspace` would, in two streams.

`cargo test` runs its ~50 test binaries one after another (616 s on this 2-core machine, their
own CPU ~470 s: most of the time they wait). The operator's tests wait the most (on a control
plane's reconcile loops and its pods), the load generator's time real sockets at full speed
and miss their marks when another test takes CPU beside them (two packages' tests at equal
priority: four of them missed). So here:
  - in front, at the usual priority, every other package's binaries one after another and the
    doc tests, as cargo runs them;
  - beside them, the operator's binaries (--beside), BESIDE_JOBS at a time, at the lowest
    priority (their own session's autogroup and nice 19): they take only the CPU the tests in
    front leave idle, as the prepare lane does (cargo's tests passed one at a time beside two
    such busy loops).
Each binary runs exactly as cargo would run it (in its package's directory, with cargo's
environment), its output printed whole when it ends, never interleaved. The binaries are the
ones `cargo test --no-run` builds: the suite's one debug build (scripts/cargo-build.sh debug).

usage: scripts/run-tests.py [--beside PACKAGE]... [--beside-after COMMAND] [-- LIBTEST-ARGS...]
  --beside PACKAGE  a package whose tests run beside the others at the lowest priority
                    (default: wsload-operator; `--beside none`: every binary in front)
  --beside-after COMMAND
                    a shell command that must succeed before the binaries beside start (what
                    they need and the ones in front do not, e.g. the control plane's build,
                    which then overlaps the tests in front); its output goes to stderr
  LIBTEST-ARGS go to every test binary, e.g. `-- --nocapture` or a test name filter.
  Env: WSLOAD_TEST_BESIDE_JOBS  binaries beside at a time (default 2)
       WSLOAD_TEST_TIMEOUT      seconds one binary may run before it is killed (default 1200)
Each binary's time is kept in target/suite/test-times.json and orders the next run (the
longest first); before one ran, its source's size stands in. Exit 0 when every binary passed.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
import common  # noqa: E402

log = common.logger("run-tests")
REPO = os.path.dirname(HERE)


def usage():
    print(__doc__[__doc__.index("usage:"):], file=sys.stderr, end="")
    sys.exit(2)


def read_arguments(argv):
    beside, rest, after = [], [], None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            rest = argv[i + 1:]
            break
        if a == "--beside" and i + 1 < len(argv):
            beside.append(argv[i + 1])
            i += 2
            continue
        if a == "--beside-after" and i + 1 < len(argv):
            after = argv[i + 1]
            i += 2
            continue
        usage()
    beside = [p for p in (beside or ["wsload-operator"]) if p != "none"]
    jobs = os.environ.get("WSLOAD_TEST_BESIDE_JOBS", "2")
    if not jobs.isdigit() or int(jobs) < 1:
        raise common.Failed(f"WSLOAD_TEST_BESIDE_JOBS must be a whole number of at least 1, not {jobs!r}")
    return beside, int(jobs), after, rest


# The lowest priority for one process and what it starts: a session of its own (so an
# autogroup of its own, with the kernel's autogroup scheduling) at nice 19, and nice 19.
LOWEST = ["sh", "-c", 'echo 19 >/proc/self/autogroup 2>/dev/null; exec nice -n 19 "$0" "$@"']


class Binary:
    def __init__(self, msg):
        target = msg["target"]
        self.exe = msg["executable"]
        self.manifest = msg["manifest_path"]
        self.dir = os.path.dirname(self.manifest)
        # "path+file:///work/main/loadgen-image#wsload@0.1.0", or "#0.1.0" when the
        # directory's name is the package's.
        frag = msg["package_id"].rsplit("#", 1)[-1]
        if "@" in frag:
            self.package, self.version = frag.rsplit("@", 1)
        else:
            self.package, self.version = os.path.basename(self.dir), frag
        self.src = target["src_path"]
        kind = target["kind"][0]
        # What cargo prints after "Running": unittests src/lib.rs, tests/fleet.rs.
        rel = os.path.relpath(self.src, self.dir)
        self.label = f"{os.path.relpath(self.dir, REPO)}: " + (f"unittests {rel}" if kind in ("lib", "bin") else rel)
        self.key = f"{self.package}/{kind}/{target['name']}"

    def argv(self, extra):
        return [self.exe] + extra

    def env(self):
        env = dict(os.environ)
        env.update(
            CARGO_MANIFEST_DIR=self.dir,
            CARGO_MANIFEST_PATH=self.manifest,
            CARGO_PKG_NAME=self.package,
            CARGO_PKG_VERSION=self.version,
            CARGO=env.get("CARGO") or shutil.which("cargo") or "cargo",
        )
        return env


class DocTests:
    """The doc tests: cargo builds and runs them itself."""

    label = "doc tests (cargo test --doc)"
    key = "doc"
    dir = REPO
    src = None

    def argv(self, extra):
        return ["cargo", "test", "--workspace", "--locked", "--doc", "--"] + extra

    def env(self):
        return dict(os.environ)


def test_binaries():
    out = subprocess.run(
        ["cargo", "test", "--workspace", "--locked", "--no-run", "--message-format=json-render-diagnostics"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    if out.returncode != 0:
        raise common.Failed("cargo test --no-run failed (above)")
    found = []
    for line in out.stdout.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("reason") == "compiler-artifact" and msg["profile"]["test"] and msg.get("executable"):
            found.append(Binary(msg))
    if not found:
        raise common.Failed("cargo test --no-run listed no test binary")
    return found


def longest_first(jobs, times):
    """The known by their last time, one never run by its source's size (~1 s a kB)."""

    def guess(j):
        if j.key in times:
            return times[j.key]
        try:
            return os.path.getsize(j.src) / 1000 if j.src else 30
        except OSError:
            return 30

    return sorted(jobs, key=guess, reverse=True)


def summary_of(output):
    """(passed, failed) summed over the binary's `test result:` lines."""
    passed = failed = 0
    for line in output.splitlines():
        if line.startswith("test result:"):
            for part in line.split(";"):
                words = part.replace(".", " ").split()
                for n, word in zip(words, words[1:]):
                    if n.isdigit() and word == "passed":
                        passed += int(n)
                    if n.isdigit() and word == "failed":
                        failed += int(n)
    return passed, failed


def main(argv):
    beside, beside_jobs, after, extra = read_arguments(argv)
    timeout = float(os.environ.get("WSLOAD_TEST_TIMEOUT", "1200"))
    times_path = os.path.join(REPO, "target", "suite", "test-times.json")
    try:
        with open(times_path) as f:
            times = json.load(f)
    except (OSError, ValueError):
        times = {}

    binaries = test_binaries()
    unknown = sorted(set(beside) - {b.package for b in binaries})
    if unknown:
        raise common.Failed(f"--beside {' '.join(unknown)}: no test binary of that package")
    front = longest_first([b for b in binaries if b.package not in beside] + [DocTests()], times)
    back = longest_first([b for b in binaries if b.package in beside], times)
    total = len(front) + len(back)
    log(
        f"{len(front)} test jobs in front, one at a time; {len(back)} of {', '.join(beside) or 'no package'} "
        f"beside them, {beside_jobs} at a time at the lowest priority"
    )
    lock = threading.Lock()
    stopping = threading.Event()
    procs = set()
    results = []
    started = time.time()

    def kill(p):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass

    def run_one(job, lowest):
        t = time.time()
        with lock:
            if stopping.is_set():
                return
            p = subprocess.Popen(
                (LOWEST if lowest else []) + job.argv(extra),
                cwd=job.dir,
                env=job.env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
                errors="replace",
                # A process group to kill on a timeout; with LOWEST, the session its autogroup
                # needs.
                start_new_session=True,
            )
            procs.add(p)
        timed_out = threading.Event()
        timer = threading.Timer(timeout, lambda: (timed_out.set(), kill(p)))
        timer.start()
        output = p.stdout.read()
        # wait4: the CPU the binary and the processes it waited for used.
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = rc = os.waitstatus_to_exitcode(status)
        timer.cancel()
        took = time.time() - t
        cpu = usage.ru_utime + usage.ru_stime
        passed, failed = summary_of(output)
        with lock:
            procs.discard(p)
            if rc == 0:
                status = "ok"
            elif timed_out.is_set():
                status = f"KILLED after {timeout:.0f}s"
            else:
                status = f"FAILED (exit {rc})"
            where = ", beside" if lowest else ""
            print(f"\n==> {job.label}: {status} in {took:.1f}s (CPU {cpu:.1f}s{where})", flush=True)
            sys.stdout.write(output)
            sys.stdout.flush()
            results.append((job, rc, took, passed, failed))
            times[job.key] = round(took, 2)

    def worker(queue, lowest):
        while True:
            with lock:
                if not queue or stopping.is_set():
                    return
                job = queue.pop(0)
            run_one(job, lowest)

    def beside_after_then_workers():
        if after:
            t = time.time()
            r = subprocess.run(["bash", "-c", after], cwd=REPO, stdout=sys.stderr, stdin=subprocess.DEVNULL)
            if r.returncode != 0:
                log(f"FAILED: --beside-after '{after}': exit {r.returncode}; the tests beside do not run")
                return
            log(f"--beside-after '{after}': done in {time.time() - t:.0f}s")
        ths = [threading.Thread(target=worker, args=(back, True)) for _ in range(beside_jobs)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()

    threads = [threading.Thread(target=worker, args=(front, False))]
    if back:
        threads.append(threading.Thread(target=beside_after_then_workers))
    for th in threads:
        th.start()
    try:
        for th in threads:
            while th.is_alive():
                th.join(0.5)
    except KeyboardInterrupt:
        stopping.set()
        with lock:
            for p in list(procs):
                kill(p)
        raise

    os.makedirs(os.path.dirname(times_path), exist_ok=True)
    with open(times_path, "w") as f:
        json.dump(times, f, indent=1, sort_keys=True)

    bad = [r for r in results if r[1] != 0]
    passed = sum(r[3] for r in results)
    failed = sum(r[4] for r in results)
    wall = time.time() - started
    busy = sum(r[2] for r in results)
    log(f"{len(results)} of {total} ran: {passed} tests passed, {failed} failed; {wall:.0f}s ({busy:.0f}s of test binaries)")
    if len(results) != total:
        raise common.Failed(f"{total - len(results)} test jobs did not run")
    if bad:
        for job, rc, took, _, _ in bad:
            log(f"FAILED: {job.label} (exit {rc}, {took:.1f}s; its output above)")
        raise common.Failed(f"{len(bad)} of {total} test jobs failed")
    return 0


if __name__ == "__main__":
    common.main_guard("run-tests", main, sys.argv[1:])
