#!/usr/bin/env python3
"""Check dashboards/*.json the only way possible without Grafana: by structure, and by running
every panel query against a real Prometheus that scraped a real run.

1. Structure (scripts/lib/grafana.py): title, uid, schemaVersion, panels with id, type, title,
   a gridPos inside the 24-column grid and overlapping no other panel, targets with an expr;
   the template variables datasource, namespace and loadtest; no datasource but ${datasource};
   no variable used that the dashboard does not declare.
2. A run to scrape: Debian's Prometheus (scripts/install-prometheus.sh) scraping every second
   a real `wsload run` of a small constantRate LoadTest (two tiers, so connections open and
   close while it is watched), beside it a real fan-out run (the Fan-out row's panels are
   checked against that one), the wsload-servers those runs start, and `wsload-operator run`
   against a local control plane (scripts/k8s/control-plane.sh) judging a LoadTest it must
   fail as InvalidSpec, so reconcile and phase metrics move.
3. Every target of every panel, variables substituted as Grafana would ($namespace All = .*,
   $loadtest the test's name, $__rate_interval 4 x the scrape interval, $__range the run), run
   with /api/v1/query_range over the run: an error, an empty result, a result with no finite
   value, or a metric name Prometheus never saw fails, naming the dashboard, panel and expr.
   The loadtest variable must list the test. Bogus queries must fail the same check.
4. The pictures: `wsload run --plot` wrote its PNG, and scripts/render-dashboard.py renders the
   overview's main panels from this Prometheus; both must have their size and real content.

usage: scripts/check-dashboards.py [--keep] [--bin-dir DIR]
  --bin-dir  where wsload, wsload-server, wsload-operator are (default: `cargo build` them,
             debug profile: a no-op after `cargo test`)
  --keep     keep the work directory (logs, Prometheus data, PNGs) even on success
The PNGs are also copied to target/dashboard-check/. About 30 s when warm.
"""

import argparse
import functools
import glob
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
# No __pycache__ left in the work tree by the import below.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(HERE, "lib"))
import common  # noqa: E402
import grafana  # noqa: E402
from common import Failed, free_port, http_status, run, tail, wait_until  # noqa: E402

log = common.logger("check-dashboards")

SCRAPE_SECONDS = 1
TEST = "dash-check"
# Two tiers: the second connects (and the first closes) while Prometheus watches, so the
# connect and handshake histograms and the close counters move mid-run, not only before the
# first scrape. Each tier ramps for 3 s, then holds 6 s: the server's address reaches the
# scrapers through file_sd, which Prometheus passes on at most every 5 s, so the second tier
# must start well after that. No thresholds: a slow machine must not fail a dashboard check
# on latency.
LOADTEST = f"""apiVersion: wsload.dev/v1alpha1
kind: LoadTest
metadata:
  name: {TEST}
spec:
  target:
    server: {{profile: echo}}
  scenario: constantRate
  connections: [10, 20]
  rate:
    stages:
      - {{duration: 3s, target: 2000}}
      - {{duration: 6s, target: 2000}}
  message: {{size: 128}}
"""
# The Fan-out row's run: wsload's publishers on 2 topics, 20 subscribers, against the managed
# server's pubsub profile (whose topic counters the row also shows). Long enough for the
# server's address to reach the scrapers (file_sd, up to 5 s) and be scraped for a while.
FANOUT_TEST = "dash-fanout"
FANOUT_LOADTEST = f"""apiVersion: wsload.dev/v1alpha1
kind: LoadTest
metadata:
  name: {FANOUT_TEST}
spec:
  target:
    server: {{profile: pubsub}}
  scenario: fanout
  connections: [20]
  duration: 14s
  warmup: 1s
  fanout: {{topics: 2, drain: 1s}}
  rate: {{messagesPerSecond: 200}}
"""
# Panels that only a fan-out run feeds: the fan-out scenario's series and the server's topic
# counters.
FANOUT_QUERY = re.compile(r'scenario="fanout"|wsload_server_topic_')
# Valid for the API server's schema, invalid for the operator (connectionStorm measures no
# RTT): judged Failed/InvalidSpec at once, with no pods needed.
INVALID = "dash-invalid"
INVALID_LOADTEST = f"""apiVersion: wsload.dev/v1alpha1
kind: LoadTest
metadata:
  name: {INVALID}
  namespace: default
spec:
  target:
    server: {{profile: echo}}
  scenario: connectionStorm
  connections: [10]
  thresholds: ["rtt.p99 < 5ms"]
"""
RUN_PNG = (1200, 900)  # loadgen-image/src/observe/plot.rs WIDTH x HEIGHT
RENDER_PNG = (1200, 800)  # render-dashboard.py: 12 x 4 inches per panel at 100 dpi, 2 panels


def png_size(path):
    """(width, height, bytes) of a PNG, from its IHDR chunk."""
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        raise Failed(f"{path} is not a PNG")
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big"), os.path.getsize(path)


def check_png(path, size, min_bytes, what):
    if not os.path.exists(path):
        raise Failed(f"{what}: {path} was not written")
    w, h, n = png_size(path)
    # A plot with axes, text and lines compresses to tens of KB; a blank or axes-only one
    # to a few.
    if (w, h) != size or n < min_bytes:
        raise Failed(f"{what}: {path} is {w}x{h}, {n} bytes; expected {size[0]}x{size[1]} and > {min_bytes} bytes")
    log(f"{what}: {os.path.relpath(path, REPO) if path.startswith(REPO) else path} {w}x{h}, {n} bytes")


def structure(paths):
    errors = []
    uids = {}
    for path in paths:
        name = os.path.relpath(path, REPO)
        try:
            d = common.load_json(path)
        except (OSError, ValueError) as e:
            errors.append(f"{name}: not JSON: {e}")
            continue
        errors += grafana.structure_errors(d, name)
        if d.get("uid") in uids:
            errors.append(f"{name}: uid {d.get('uid')!r} also used by {uids[d['uid']]}")
        uids[d.get("uid")] = name
    return errors


def structure_self_test(path):
    """The structure check must reject what it exists to catch."""
    d = common.load_json(path)
    panel = next(p for p in grafana.all_panels(d) if p.get("type") != "row")
    panel["datasource"] = {"type": "prometheus", "uid": "P1809F7CD0C75ACF3"}
    del panel["gridPos"]
    panel["targets"][0]["expr"] += ' + on() vector($undeclared)'
    d["templating"]["list"] = [v for v in d["templating"]["list"] if v["name"] != "loadtest"]
    errors = "\n".join(grafana.structure_errors(d, "broken"))
    for expect in ("P1809F7CD0C75ACF3", "missing 'gridPos'", "$undeclared", "no 'loadtest' variable"):
        if expect not in errors:
            raise Failed(f"the structure check missed {expect!r} in a broken dashboard; it said:\n{errors}")


METRIC_NAME = re.compile(r"\b(wsload_[a-z0-9_]+)\b")


def check_target(prom, names, expr, start, end):
    """Why `expr` (variables substituted) is not a working panel query over [start, end], or
    None."""
    unknown = sorted({m for m in METRIC_NAME.findall(expr) if m not in names})
    if unknown:
        return f"Prometheus never saw {', '.join(unknown)}"
    try:
        series = prom.query_range(expr, start, end, SCRAPE_SECONDS)
    except grafana.PrometheusError as e:
        return f"query failed: {e}"
    if not series:
        return "empty result"
    if grafana.finite_points(series) == 0:
        return f"{len(series)} series but no finite value (only NaN)"
    return None


def main(argv):
    ap = argparse.ArgumentParser(description="Check the Grafana dashboards against a real Prometheus.")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--bin-dir")
    args = ap.parse_args(argv)
    started = time.time()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    paths = sorted(glob.glob(os.path.join(REPO, "dashboards", "*.json")))
    if not paths:
        raise Failed("no dashboards/*.json")
    errors = structure(paths)
    if errors:
        raise Failed("dashboard structure:\n  " + "\n  ".join(errors))
    structure_self_test(paths[0])
    dashboards = {os.path.relpath(p, REPO): common.load_json(p) for p in paths}
    log(f"structure of {len(paths)} dashboards OK (and a broken one is rejected)")

    t = time.time()
    if args.bin_dir:
        bins = os.path.abspath(args.bin_dir)
    else:
        # The suite's one debug build, shared with the tests (scripts/cargo-build.sh).
        bins = run([os.path.join(HERE, "cargo-build.sh"), "debug"], "cargo build", timeout=1800).strip()
    for b in ("wsload", "wsload-server", "wsload-operator"):
        if not os.access(os.path.join(bins, b), os.X_OK):
            raise Failed(f"{bins}/{b} missing")
    prometheus = run([os.path.join(HERE, "install-prometheus.sh")], "install-prometheus.sh").strip()
    k8s = os.path.join(HERE, "k8s")
    run([os.path.join(k8s, "build.sh"), "kube-apiserver", "kubectl"], "scripts/k8s/build.sh", timeout=3600)
    k8s_bin = run(["bash", "-c", f'source "{k8s}/versions.sh" && printf %s "$K8S_BIN_DIR"'], "versions.sh")
    kubectl_bin = os.path.join(k8s_bin, "kubectl")
    log(f"binaries ready in {time.time() - t:.0f}s ({bins}, {prometheus}, {kubectl_bin})")

    work = tempfile.mkdtemp(prefix="wsload-dashboards.")
    cluster = os.path.join(work, "cluster")
    procs = common.Processes(log)
    ok = False
    cluster_up = {}

    def up():
        try:
            r = subprocess.run([os.path.join(k8s, "control-plane.sh"), "up", cluster],
                               capture_output=True, text=True, timeout=300)
            cluster_up["rc"], cluster_up["out"] = r.returncode, r.stdout + r.stderr
        except Exception as e:  # reported by the main thread
            cluster_up["rc"], cluster_up["out"] = -1, repr(e)

    # The control plane starts in the background while the load runs.
    cp = threading.Thread(target=up)
    cp.start()
    try:

        prom_port, run_port, op_port, fanout_port = free_port(), free_port(), free_port(), free_port()
        server_sd = os.path.join(work, "server-targets.json")
        with open(server_sd, "w") as f:
            f.write("[]\n")
        config = os.path.join(work, "prometheus.yml")
        with open(config, "w") as f:
            # Locally no target has a namespace or pod label, as in a `wsload run` that people
            # scrape by hand: the dashboards must work with the variables on All.
            f.write(f"""global:
  scrape_interval: {SCRAPE_SECONDS}s
  scrape_timeout: {SCRAPE_SECONDS}s
scrape_configs:
  - job_name: wsload
    static_configs: [{{targets: ["127.0.0.1:{run_port}", "127.0.0.1:{fanout_port}"]}}]
  - job_name: wsload-server
    file_sd_configs: [{{files: ["{server_sd}"], refresh_interval: 1s}}]
  - job_name: wsload-operator
    static_configs: [{{targets: ["127.0.0.1:{op_port}"]}}]
""")
        prom_log = os.path.join(work, "prometheus.log")
        prom_proc = procs.start("prometheus", [
            prometheus, f"--config.file={config}", f"--storage.tsdb.path={work}/prometheus-data",
            f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn",
        ], prom_log)
        prom_url = f"http://127.0.0.1:{prom_port}"
        wait_until("Prometheus ready", lambda: http_status(f"{prom_url}/-/ready") == 200, 30, prom_proc, prom_log)
        prom = grafana.Prometheus(prom_url)

        def scraping():
            # Prometheus hands discovered targets to the scrapers at most every 5 s, so "ready"
            # is seconds before the first scrape: start the load only once the static targets
            # are being scraped (down until their processes listen), or its first seconds are
            # lost. A file_sd change (the server's address) takes as long: the second tier
            # gives the server's histograms something to show.
            active = prom.get("/api/v1/targets", state="active")["activeTargets"]
            return sum(1 for t in active if t.get("lastScrape", "").startswith("20")) >= 3

        wait_until("Prometheus scraping its static targets", scraping, 30, prom_proc, prom_log)
        begin = time.time()
        log(f"Prometheus {prom_url} scraping every {SCRAPE_SECONDS}s")

        lt_file = os.path.join(work, "loadtest.yaml")
        with open(lt_file, "w") as f:
            f.write(LOADTEST)
        run_png = os.path.join(work, "run.png")
        run_log = os.path.join(work, "wsload.log")
        wsload = procs.start("wsload run", [
            os.path.join(bins, "wsload"), "run", lt_file, "--metrics-listen", f"127.0.0.1:{run_port}",
            "--plot", run_png, "--out", os.path.join(work, "result.json"),
        ], run_log, stderr_pipe=True)
        fanout_file = os.path.join(work, "fanout.yaml")
        with open(fanout_file, "w") as f:
            f.write(FANOUT_LOADTEST)
        fanout_log = os.path.join(work, "wsload-fanout.log")
        fanout_run = procs.start("wsload run (fanout)", [
            os.path.join(bins, "wsload"), "run", fanout_file, "--metrics-listen", f"127.0.0.1:{fanout_port}",
            "--out", os.path.join(work, "fanout-result.json"),
        ], fanout_log, stderr_pipe=True)
        # Each run's managed server, by the run's name, once it says where it serves metrics.
        server_metrics = {}
        sd_lock = threading.Lock()

        def follow_stderr(proc, log_path, name):
            # Tells Prometheus where the managed servers serve their metrics, once wsload says.
            with open(log_path, "a") as out:
                for line in iter(proc.stderr.readline, b""):
                    text = line.decode(errors="replace")
                    out.write(text)
                    out.flush()
                    addr = common.managed_metrics_addr(text)
                    if not addr:
                        continue
                    with sd_lock:
                        if name in server_metrics:
                            continue
                        server_metrics[name] = addr
                        tmp = server_sd + ".tmp"
                        with open(tmp, "w") as sd:
                            json.dump([{"targets": sorted(server_metrics.values())}], sd)
                        os.replace(tmp, server_sd)

        follower = threading.Thread(target=follow_stderr, args=(wsload, run_log, TEST), daemon=True)
        follower.start()
        fanout_follower = threading.Thread(target=follow_stderr, args=(fanout_run, fanout_log, FANOUT_TEST),
                                           daemon=True)
        fanout_follower.start()

        cp.join()
        if cluster_up.get("rc") != 0:
            raise Failed(f"control-plane.sh up: exit {cluster_up.get('rc')}\n{cluster_up.get('out')}")
        env = dict(os.environ, KUBECONFIG=os.path.join(cluster, "kubeconfig"),
                   KUBECACHEDIR=os.path.join(work, "kube-cache"))

        kubectl = functools.partial(common.kubectl, kubectl_bin, env)
        kubectl("apply", "--server-side", "-f", os.path.join(REPO, "crds", "loadtest.yaml"))
        wait_until("the LoadTest CRD Established",
                   lambda: common.crd_established(kubectl_bin, env, "loadtests.wsload.dev"), 60)
        op_log = os.path.join(work, "operator.log")
        # The operator refuses to start without the key it derives shard control tokens from;
        # the chart generates one, here a random one in a private file serves.
        key_file = os.path.join(work, "control-key")
        with open(os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(secrets.token_hex(32))
        op = procs.start("wsload-operator", [
            os.path.join(bins, "wsload-operator"), "run", "--leader-elect", "true",
            "--lease-namespace", "default", "--metrics-listen", f"127.0.0.1:{op_port}",
            "--control-key-file", key_file,
        ], op_log, env=env)
        # Ready = holds the Lease; then a few scrapes before the LoadTest, so the reconciles
        # show as an increase, not as the first value of a new series.
        wait_until("wsload-operator ready (leader)", lambda: http_status(f"http://127.0.0.1:{op_port}/readyz") == 200,
                 60, op, op_log)
        time.sleep(3 * SCRAPE_SECONDS)
        kubectl("apply", "-f", "-", stdin=INVALID_LOADTEST)
        status = {}

        def judged():
            out = kubectl("get", "loadtest", INVALID, "-n", "default", "-o", "jsonpath={.status.phase}/{.status.reason}")
            status["s"] = out
            return out == "Failed/InvalidSpec"

        wait_until(f"the operator judging LoadTest {INVALID} Failed/InvalidSpec (now {status.get('s')!r})", judged, 60, op, op_log)
        log("operator: LoadTest dash-invalid is Failed/InvalidSpec")

        try:
            rc = wsload.wait(timeout=120)
        except subprocess.TimeoutExpired:
            raise Failed(f"wsload run did not finish in 120s{tail(run_log)}")
        follower.join(timeout=5)
        if rc != 0:
            raise Failed(f"wsload run exited {rc}{tail(run_log)}")
        if TEST not in server_metrics:
            raise Failed(f"wsload run never named its managed server's metrics address{tail(run_log)}")
        try:
            rc = fanout_run.wait(timeout=120)
        except subprocess.TimeoutExpired:
            raise Failed(f"wsload run (fanout) did not finish in 120s{tail(fanout_log)}")
        fanout_follower.join(timeout=5)
        if rc != 0:
            raise Failed(f"wsload run (fanout) exited {rc}{tail(fanout_log)}")
        if FANOUT_TEST not in server_metrics:
            raise Failed(f"wsload run (fanout) never named its managed server's metrics address{tail(fanout_log)}")
        check_png(run_png, RUN_PNG, 20_000, "wsload run --plot")
        # The last scrapes of the operator and of the run's final second.
        time.sleep(2 * SCRAPE_SECONDS + 1)
        end = time.time()
        log(f"run scraped for {end - begin:.0f}s")

        names = prom.metric_names()
        values = grafana.grafana_values(end - begin, SCRAPE_SECONDS, namespace=".*", loadtest=TEST)
        fanout_values = grafana.grafana_values(end - begin, SCRAPE_SECONDS, namespace=".*", loadtest=FANOUT_TEST)
        failures = []
        passed = 0
        for dname, d in dashboards.items():
            for vname in ("namespace", "loadtest"):
                var = grafana.variables(d)[vname]
                selector, label = grafana.variable_query(var)
                try:
                    got = prom.label_values(label, grafana.substitute(selector, values), begin, end)
                except (grafana.PrometheusError, KeyError) as e:
                    failures.append(f"{dname}: variable {vname}: {selector}: {e}")
                    continue
                # Locally there is no namespace label: the namespace list is empty, All stays.
                if vname == "loadtest" and TEST not in got:
                    failures.append(f"{dname}: variable loadtest ({selector}, {label}) lists {got}, not {TEST!r}")
                else:
                    passed += 1
            for panel in grafana.all_panels(d):
                for target in panel.get("targets", []) or []:
                    fanout = FANOUT_QUERY.search(target["expr"])
                    expr = grafana.substitute(target["expr"], fanout_values if fanout else values)
                    why = check_target(prom, names, expr, begin, end)
                    if why:
                        failures.append(f"{dname}: panel {panel.get('title')!r} {target.get('refId')}: {why}\n      {expr}")
                    else:
                        passed += 1
        # The check itself must fail on what it exists to catch.
        for bogus in ("sum(rate(wsload_no_such_metric_total[4s]))", "sum by (le (rate(wsload_rtt_seconds_bucket[4s]))",
                      'sum(rate(wsload_messages_sent_total{test="no-such-test"}[4s]))'):
            if check_target(prom, names, bogus, begin, end) is None:
                failures.append(f"the query check accepted a bogus expr: {bogus}")
        if failures:
            raise Failed(f"{len(failures)} dashboard queries failed against {prom_url}:\n  " + "\n  ".join(failures))
        log(f"{passed} panel queries and variables return data; 3 bogus queries are rejected")

        overview_png = os.path.join(work, "overview.png")
        r = subprocess.run([
            sys.executable, os.path.join(HERE, "render-dashboard.py"), "--prometheus", prom_url,
            "--var", f"loadtest={TEST}", "--start", f"{begin:.3f}", "--end", f"{end:.3f}", "--step", "1",
            "--scrape-interval", str(SCRAPE_SECONDS), "--out", overview_png,
        ], capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            raise Failed(f"render-dashboard.py: exit {r.returncode}\n{r.stdout}{r.stderr}")
        check_png(overview_png, RENDER_PNG, 30_000, "render-dashboard.py")
        keep = os.path.join(REPO, "target", "dashboard-check")
        os.makedirs(keep, exist_ok=True)
        for png in (run_png, overview_png):
            shutil.copy(png, keep)
        log(f"PNGs copied to {os.path.relpath(keep, REPO)}/ (run.png, overview.png)")
        ok = True
        log(f"passed in {time.time() - started:.0f}s")
        print(f"dashboards: {passed} passed, 0 failed")
        return 0
    finally:
        procs.stop_all()
        # `down` after `up` has returned, or it could race the daemons `up` still starts.
        cp.join()
        subprocess.run([os.path.join(k8s, "control-plane.sh"), "down", cluster], capture_output=True)
        if ok and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"kept {work} (prometheus.log, wsload.log, operator.log, cluster/*.log)")


if __name__ == "__main__":
    common.main_guard("check-dashboards", main)
