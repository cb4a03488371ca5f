"""Grafana dashboard JSON as wsload ships it (dashboards/*.json), read without Grafana.

Grafana cannot run on the project's machines, so the dashboards are checked by structure and
by running every panel query against a real Prometheus (scripts/check-dashboards.py), and
rendered to a PNG for people without Grafana (scripts/render-dashboard.py). Both read the
dashboards through this module: panels, their targets, and the template variables substituted
the way Grafana would before a query reaches Prometheus. Standard library only.
"""

import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request

# The template variables every wsload dashboard declares, in order.
REQUIRED_VARIABLES = ("datasource", "namespace", "loadtest")
# What a panel or target must use as its datasource: the variable, never a fixed uid.
DATASOURCE_REF = {"type": "prometheus", "uid": "${datasource}"}
# Panel types these dashboards use; a typo here would show as an empty box in Grafana.
PANEL_TYPES = {"row", "timeseries", "stat", "heatmap", "gauge", "bargauge", "table", "text"}
GRID_COLUMNS = 24

# $name, ${name} and ${name:format}; Grafana's built-ins start with two underscores.
VARIABLE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\$(\w+)")


def all_panels(dashboard):
    """Every panel, with those folded inside collapsed rows, in order."""
    for p in dashboard.get("panels", []):
        yield p
        for inner in p.get("panels", []) or []:
            yield inner


def variables(dashboard):
    return {v.get("name"): v for v in dashboard.get("templating", {}).get("list", [])}


def structure_errors(dashboard, name="dashboard"):
    """What keeps `dashboard` from being a well-formed wsload dashboard, as messages."""
    errors = []

    def err(msg):
        errors.append(f"{name}: {msg}")

    for key in ("title", "uid", "panels", "templating", "schemaVersion"):
        if key not in dashboard:
            err(f"missing top-level key {key!r}")
    uid = dashboard.get("uid")
    if not isinstance(uid, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,40}", uid or ""):
        err(f"uid {uid!r} must be 1-40 letters, digits, '-' or '_' (Grafana's limit)")
    if not isinstance(dashboard.get("schemaVersion"), int) or not 36 <= dashboard["schemaVersion"] <= 41:
        err(f"schemaVersion {dashboard.get('schemaVersion')!r}: expected 36..41 (Grafana 9.4 to 11)")
    if dashboard.get("id") not in (None,):
        err("id must be null: Grafana assigns it on import, a fixed one overwrites another dashboard")

    declared = variables(dashboard)
    for v in REQUIRED_VARIABLES:
        if v not in declared:
            err(f"templating: no {v!r} variable")
    ds = declared.get("datasource")
    if ds is not None and (ds.get("type") != "datasource" or ds.get("query") != "prometheus"):
        err("templating: 'datasource' must be of type datasource with query 'prometheus'")
    for v in ("namespace", "loadtest"):
        var = declared.get(v)
        if var is None:
            continue
        if var.get("type") != "query" or "label_values(" not in json.dumps(var.get("query")):
            err(f"templating: {v!r} must be a label_values query variable")
        # A local run has no namespace label: All must match an absent label, so `.*`.
        if not var.get("includeAll") or var.get("allValue") != ".*":
            err(f"templating: {v!r} needs includeAll with allValue '.*'")

    # No datasource anywhere but the variable (the datasource variable itself has none).
    def walk(node, where):
        if isinstance(node, dict):
            for k, val in node.items():
                if k == "datasource" and val != DATASOURCE_REF:
                    err(f"{where}: datasource {val!r}, expected {DATASOURCE_REF!r}")
                walk(val, f"{where}.{k}")
        elif isinstance(node, list):
            for i, val in enumerate(node):
                walk(val, f"{where}[{i}]")

    walk(dashboard, "$")

    ids = set()
    cells = {}
    for p in all_panels(dashboard):
        title = p.get("title")
        label = f"panel {p.get('id')!r} {title!r}"
        for key in ("id", "type", "title", "gridPos"):
            if key not in p:
                err(f"{label}: missing {key!r}")
        if not isinstance(title, str) or not title.strip():
            err(f"{label}: empty title")
        if p.get("id") in ids:
            err(f"{label}: duplicate id")
        ids.add(p.get("id"))
        if p.get("type") not in PANEL_TYPES:
            err(f"{label}: unknown type {p.get('type')!r}")
        g = p.get("gridPos") or {}
        if not all(isinstance(g.get(k), int) for k in ("h", "w", "x", "y")):
            err(f"{label}: gridPos needs integer h, w, x, y, got {g!r}")
        else:
            if g["w"] < 1 or g["h"] < 1 or g["x"] < 0 or g["x"] + g["w"] > GRID_COLUMNS:
                err(f"{label}: gridPos {g!r} outside the {GRID_COLUMNS}-column grid")
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    other = cells.setdefault((x, y), label)
                    if other != label:
                        err(f"{label}: overlaps {other}")
                        break
                else:
                    continue
                break
        if p.get("type") == "row":
            continue
        targets = p.get("targets")
        if not isinstance(targets, list) or not targets:
            err(f"{label}: no targets")
            continue
        refs = set()
        for t in targets:
            if not isinstance(t.get("expr"), str) or not t["expr"].strip():
                err(f"{label}: target {t.get('refId')!r} has no expr")
            if t.get("refId") in refs or not t.get("refId"):
                err(f"{label}: refId {t.get('refId')!r} missing or repeated")
            refs.add(t.get("refId"))
            for m in VARIABLE.finditer(t.get("expr", "")):
                var = m.group(1) or m.group(2)
                if not var.startswith("__") and var not in declared:
                    err(f"{label}: expr uses ${var}, which the dashboard does not declare")
    return errors


def substitute(expr, values):
    """`expr` with every variable replaced from `values` (name -> text); KeyError names one
    that has no value."""

    def one(m):
        var = m.group(1) or m.group(2)
        if var not in values:
            raise KeyError(var)
        return values[var]

    return VARIABLE.sub(one, expr)


def grafana_values(range_seconds, scrape_seconds, namespace=".*", loadtest=".*"):
    """The values Grafana would give the variables for a dashboard over `range_seconds`
    against a Prometheus scraping every `scrape_seconds`: $__rate_interval is
    max($__interval + scrape interval, 4 x scrape interval), with $__interval at the scrape
    interval (the minimum Grafana uses)."""
    rng = max(int(math.ceil(range_seconds)), 1)
    interval = max(int(scrape_seconds), 1)
    return {
        "namespace": namespace,
        "loadtest": loadtest,
        "__interval": f"{interval}s",
        "__interval_ms": str(interval * 1000),
        "__rate_interval": f"{max(2 * interval, 4 * interval)}s",
        "__range": f"{rng}s",
        "__range_s": str(rng),
        "__range_ms": str(rng * 1000),
    }


def legend(fmt, labels):
    """Grafana's legendFormat: {{label}} from the series' labels."""
    if not fmt or fmt == "__auto":
        return ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip()


class PrometheusError(Exception):
    pass


class Prometheus:
    def __init__(self, base_url, timeout=10):
        self.base = base_url.rstrip("/")
        self.timeout = timeout

    def get(self, path, **params):
        url = f"{self.base}{path}?{urllib.parse.urlencode(params, doseq=True)}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:
            try:
                body = json.load(e)
            except ValueError:
                raise PrometheusError(f"HTTP {e.code} from {path}") from e
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise PrometheusError(f"{path}: {e}") from e
        if body.get("status") != "success":
            raise PrometheusError(f"{body.get('errorType', 'error')}: {body.get('error', body)}")
        return body["data"]

    def query_range(self, expr, start, end, step):
        data = self.get("/api/v1/query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=step)
        if data.get("resultType") != "matrix":
            raise PrometheusError(f"expected a matrix, got {data.get('resultType')}")
        return data["result"]

    def label_values(self, label, match, start, end):
        return self.get(f"/api/v1/label/{label}/values", **{"match[]": match, "start": f"{start:.3f}", "end": f"{end:.3f}"})

    def metric_names(self):
        """Names with series, and names whose HELP/TYPE a target exposes even without series
        yet (a counter whose labels appear on first use)."""
        names = set(self.get("/api/v1/label/__name__/values"))
        for family, entries in self.get("/api/v1/metadata").items():
            names.add(family)
            # OpenMetrics names a counter's family without `_total`, its samples with it.
            if any(e.get("type") == "counter" for e in entries) and not family.endswith("_total"):
                names.add(f"{family}_total")
        return names


def finite_points(series):
    """How many sample values of a query_range result are real numbers (not NaN or Inf)."""
    n = 0
    for s in series:
        for _, v in s.get("values", []):
            try:
                if math.isfinite(float(v)):
                    n += 1
            except ValueError:
                pass
    return n


# label_values(metric{selector}, label) as a variable query: the selector and the label.
LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(.*?)\s*,\s*(\w+)\s*\)\s*$", re.S)


def variable_query(var):
    q = var.get("query")
    if isinstance(q, dict):
        q = q.get("query")
    m = LABEL_VALUES.match(q or "")
    if not m:
        raise ValueError(f"variable {var.get('name')!r}: not label_values(SELECTOR, LABEL): {q!r}")
    return m.group(1), m.group(2)
