#!/usr/bin/env python3
"""Render panels of a wsload Grafana dashboard to a PNG, from a Prometheus, without Grafana.

By default the LoadTest overview's two main panels, "RTT percentiles" and "Messages per
second: achieved vs target", over the last 15 minutes: the same queries as the dashboard
(template variables substituted as Grafana would), one line per series, the dashboard's
legends and units.

    scripts/render-dashboard.py --prometheus http://127.0.0.1:9090 \\
        --var loadtest=quickstart --out overview.png
    scripts/render-dashboard.py --prometheus URL --dashboard dashboards/server.json \\
        --panel "Handshake latency" --panel "Connections closed by reason" --out server.png

matplotlib comes from a virtualenv this script makes once under ${WSLOAD_CACHE:-~/.cache/wsload}
with the exact pins of scripts/render-requirements.txt (the first run installs them from PyPI;
later runs start at once). Exit codes: 0 written, 1 a panel had no data or Prometheus failed,
2 bad arguments.
"""

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
REQUIREMENTS = os.path.join(HERE, "render-requirements.txt")
DEFAULT_DASHBOARD = os.path.join(REPO, "dashboards", "loadtest-overview.json")
DEFAULT_PANELS = ["RTT percentiles", "Messages per second: achieved vs target"]
# Set in the re-executed process: it runs inside the virtualenv already.
IN_VENV = "WSLOAD_RENDER_VENV"

# No __pycache__ left in the work tree by the import below.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(HERE, "lib"))
import common  # noqa: E402
import grafana  # noqa: E402

log = common.logger("render-dashboard")


def venv_dir():
    cache = os.environ.get("WSLOAD_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "wsload")
    h = hashlib.sha256()
    with open(REQUIREMENTS, "rb") as f:
        h.update(f.read())
    # The environment links to this interpreter's installation, not just its version.
    h.update(sys.version.encode())
    h.update(os.path.realpath(sys.executable).encode())
    return cache, os.path.join(cache, f"render-venv-{h.hexdigest()[:16]}")


def ensure_venv():
    """The virtualenv's python, made (once, under a lock) if missing. A `.complete` marker is
    written last, so an interrupted install is redone."""
    cache, venv = venv_dir()
    python = os.path.join(venv, "bin", "python")
    if os.path.exists(os.path.join(venv, ".complete")):
        return python
    os.makedirs(cache, exist_ok=True)
    with open(os.path.join(cache, "render-venv.lock"), "w") as lock:
        # Two runs sharing a cache must not build the same directory at once.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(os.path.join(venv, ".complete")):
            return python
        log(f"installing matplotlib into {venv} (once; pins in {os.path.relpath(REQUIREMENTS, REPO)})")
        shutil.rmtree(venv, ignore_errors=True)
        # pip and venv print progress on stdout: to stderr, by the scripts' stdout contract.
        subprocess.run([sys.executable, "-m", "venv", venv], check=True, stdout=sys.stderr)
        pip = [python, "-m", "pip", "--disable-pip-version-check"]
        subprocess.run(pip + ["install", "--quiet", "--no-deps", "-r", REQUIREMENTS], check=True, stdout=sys.stderr)
        check = subprocess.run(pip + ["check"], capture_output=True, text=True)
        if check.returncode != 0:
            sys.exit(f"render-dashboard: {REQUIREMENTS} is not a complete dependency set:\n{check.stdout}{check.stderr}")
        subprocess.run([python, "-c", "import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot"], check=True,
                       stdout=sys.stderr)
        open(os.path.join(venv, ".complete"), "w").close()
        # Environments of earlier pins would otherwise pile up in the cache.
        for old in os.listdir(cache):
            path = os.path.join(cache, old)
            if old.startswith("render-venv-") and path != venv and os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
    return python


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prometheus", required=True, help="Prometheus base URL, e.g. http://127.0.0.1:9090")
    p.add_argument("--dashboard", default=DEFAULT_DASHBOARD, help="dashboard JSON (default: the LoadTest overview)")
    p.add_argument("--panel", action="append", help="panel title to render (repeatable; default: %s)" % " and ".join(repr(t) for t in DEFAULT_PANELS))
    p.add_argument("--var", action="append", default=[], metavar="NAME=VALUE", help="template variable value, e.g. loadtest=quickstart (default: All, i.e. '.*')")
    p.add_argument("--start", type=float, help="Unix seconds (default: --end minus --last)")
    p.add_argument("--end", type=float, help="Unix seconds (default: now)")
    p.add_argument("--last", type=float, default=900, help="seconds before --end when --start is not given (default 900)")
    p.add_argument("--step", type=float, help="seconds between points (default: the range / 300, at least the scrape interval)")
    p.add_argument("--scrape-interval", type=float, default=15, help="the Prometheus scrape interval, for $__rate_interval as Grafana computes it (default 15)")
    p.add_argument("--title", help="figure title (default: the dashboard's)")
    p.add_argument("--out", required=True, help="PNG to write")
    return p.parse_args(argv)


def to_unit(unit, values):
    """Values in the unit people read: seconds as milliseconds."""
    if unit == "s":
        return [v * 1e3 for v in values], "ms"
    return values, {"Bps": "bytes/s", "short": "", "percentunit": "fraction"}.get(unit, unit or "")


def render(args):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.ticker as mticker
    import matplotlib.pyplot as plt
    from datetime import datetime

    dashboard = common.load_json(args.dashboard)
    titles = args.panel or DEFAULT_PANELS
    by_title = {p.get("title"): p for p in grafana.all_panels(dashboard)}
    missing = [t for t in titles if t not in by_title]
    if missing:
        log(f"no panel {missing} in {args.dashboard}; it has: {sorted(t for t in by_title if t)}")
        return 2
    end = args.end or time.time()
    start = args.start or end - args.last
    if end <= start:
        log("--end must be after --start")
        return 2
    step = args.step or max(args.scrape_interval, (end - start) / 300)
    values = grafana.grafana_values(end - start, args.scrape_interval)
    for kv in args.var:
        name, sep, value = kv.partition("=")
        if not sep:
            log(f"--var {kv!r}: expected NAME=VALUE")
            return 2
        values[name] = value
    prom = grafana.Prometheus(args.prometheus)

    fig, axes = plt.subplots(len(titles), 1, figsize=(12, 4 * len(titles)), dpi=100, squeeze=False, sharex=True)
    fig.suptitle(args.title or f"{dashboard.get('title')} ({', '.join(f'{k}={v}' for k, v in sorted(values.items()) if not k.startswith('__'))})", fontsize=13)
    empty = []
    for ax, title in zip((a[0] for a in axes), titles):
        panel = by_title[title]
        defaults = panel.get("fieldConfig", {}).get("defaults", {})
        unit = defaults.get("unit")
        lines = 0
        for target in panel.get("targets", []):
            expr = grafana.substitute(target["expr"], values)
            try:
                series = prom.query_range(expr, start, end, step)
            except grafana.PrometheusError as e:
                log(f"panel {title!r}: {expr}: {e}")
                return 1
            for s in series:
                points = [(float(t), float(v)) for t, v in s["values"]]
                ys, ylabel = to_unit(unit, [v for _, v in points])
                xs = [datetime.fromtimestamp(t) for t, _ in points]
                ax.plot(xs, ys, label=grafana.legend(target.get("legendFormat"), s["metric"]), linewidth=1.5)
                ax.set_ylabel(ylabel)
                lines += 1
        if lines == 0:
            empty.append(title)
        ax.set_title(title, fontsize=11)
        if defaults.get("custom", {}).get("scaleDistribution", {}).get("type") == "log":
            ax.set_yscale("log")
            # Plain numbers (0.5, 2, 10), not matplotlib's 2x10^0.
            plain = mticker.FuncFormatter(lambda v, _: f"{v:g}")
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(plain)
        ax.grid(True, which="major", color="#dddddd")
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
        ax.set_xlim(datetime.fromtimestamp(start), datetime.fromtimestamp(end))
        if lines:
            ax.legend(loc="upper left", fontsize=8, ncol=4)
    fig.tight_layout()
    fig.savefig(args.out)
    plt.close(fig)
    if empty:
        log(f"no data for {empty} between {start:.0f} and {end:.0f} (variables {values})")
        return 1
    log(f"wrote {args.out} ({len(titles)} panels)")
    return 0


def main(argv):
    args = parse_args(argv)
    if os.environ.get(IN_VENV) != "1":
        python = ensure_venv()
        env = dict(os.environ, **{IN_VENV: "1"})
        os.execve(python, [python, os.path.abspath(__file__)] + argv, env)
    return render(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
