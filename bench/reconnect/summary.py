"""One line of figures from a `wsload run` report's reconnect lines (bench/reconnect/run.sh).

usage: summary.py POLICY REPORT.txt
"""

import re
import sys


def duration_ms(text):
    """`84.42 ms`, `1.20 s`, `71 us` in milliseconds; `-` (nothing measured) is 0."""
    text = text.strip()
    if text == "-":
        return 0.0
    value, unit = text.split()
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def count(text):
    """`1.2K`, `3.45M`, `789` as a number."""
    scale = {"K": 1e3, "M": 1e6}.get(text[-1], 1)
    return round(float(text.rstrip("KM")) * scale)


def main():
    policy, path = sys.argv[1], sys.argv[2]
    text = open(path, encoding="utf-8").read()
    line = next((l for l in text.splitlines() if l.startswith("  kill ")), None)
    if line is None:
        sys.exit(f"{path}: no disruption line in the report")
    fig = {"policy": policy}
    m = re.search(r": ([\d.KM]+) dropped, ([\d.KM]+) back", line)
    fig["dropped"], fig["back"] = count(m.group(1)), count(m.group(2))
    m = re.search(r"([\d.KM]+) never back", line)
    fig["never_back"] = count(m.group(1)) if m else 0
    m = re.search(r"([\d.KM]+) attempts \(peak ([\d.KM]+)/s over 100 ms\)", line)
    fig["attempts"], fig["peak_attempts_per_s"] = (count(m.group(1)), count(m.group(2))) if m else (0, 0)
    m = re.search(r"all within ([^)]+) of it", line)
    fig["all_back_ms"] = round(duration_ms(m.group(1))) if m else "never"
    m = re.search(r"reconnect handshake p99 (.+?) \(first connections' (.+?)\)", line)
    if m:
        fig["handshake_p99_ms"] = round(duration_ms(m.group(1)), 2)
        fig["first_handshake_p99_ms"] = round(duration_ms(m.group(2)), 2)
    m = re.search(r"downtime p50 (.+?), p99 (.+?), max (.+?);", line)
    if m:
        fig["downtime_p99_ms"] = round(duration_ms(m.group(2)))
    print(" ".join(f"{k}={v}" for k, v in fig.items()))


if __name__ == "__main__":
    main()
