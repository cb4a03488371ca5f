"""One row of bench/fanout/run.sh's table from a `wsload run --out` result of a fanout:
deliveries/s, completeness, gaps, latency p50/p99/p99.9, the server's own topic counters, what
the subscribers read and were owed a second, and whether the cell measured anything.

usage: python3 summary.py RESULT.json  -> one JSON object on stdout

The latency percentiles are the report's (figures.fanout.latency) when the result has them;
otherwise they are read from the merged delivery-latency histogram (hists.fanout: HdrHistogram
V2 + deflate, base64, microseconds), decoded here, so the table needs no other tool.
"""
import base64
import json
import math
import struct
import sys
import zlib

# HdrHistogram's V2 cookies (Java's, and the Rust crate's with bit 0x10 set).
V2_COMPRESSED = (0x1C849304, 0x1C849314)
V2 = (0x1C849303, 0x1C849313)


def _varints(data, pos):
    """ZigZag LEB128 numbers, as HdrHistogram's V2 encodes its counts."""
    while pos < len(data):
        value, shift = 0, 0
        while True:
            b = data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80 or shift >= 63:
                if shift >= 63 and b >= 0x80:
                    value |= data[pos] << 56
                    pos += 1
                break
        yield (value >> 1) ^ -(value & 1)


def hist_counts(b64):
    """{value in microseconds (highest equivalent): count} of a serialized Hist."""
    raw = base64.b64decode(b64)
    cookie, length = struct.unpack(">II", raw[:8])
    if cookie not in V2_COMPRESSED:
        raise ValueError(f"not a V2 deflate histogram (cookie {cookie:#x})")
    body = zlib.decompress(raw[8 : 8 + length])
    cookie, payload, _offset, digits, lowest, _highest, _ratio = struct.unpack(
        ">IIIIQQd", body[:40]
    )
    if cookie not in V2:
        raise ValueError(f"not a V2 histogram (cookie {cookie:#x})")
    sub_bucket_count = 1 << math.ceil(math.log2(2 * 10**digits))
    half_magnitude = int(math.log2(sub_bucket_count)) - 1
    half = sub_bucket_count // 2
    unit = int(math.floor(math.log2(lowest)))
    counts, index = {}, 0
    for n in _varints(body[40 : 40 + payload], 0):
        if n < 0:
            index += -n
            continue
        if n:
            bucket = (index >> half_magnitude) - 1
            sub = (index & (half - 1)) + half
            if bucket < 0:
                sub -= half
                bucket = 0
            value = sub << (bucket + unit)
            counts[value + (1 << (bucket + unit)) - 1] = n
        index += 1
    return counts


def percentiles(counts, qs):
    total = sum(counts.values())
    out = []
    for q in qs:
        want = max(1, math.ceil(q * total))
        seen = 0
        for value in sorted(counts):
            seen += counts[value]
            if seen >= want:
                out.append(value / 1e6)
                break
        else:
            out.append(0.0)
    return out


def row(path):
    r = json.load(open(path))
    c = r["cells"][0]
    f = c["counts"].get("fanout") or {}
    by_server = f.get("byServer", False)
    publishes = expected = delivered = dups = 0
    for t in f.get("topics", []):
        p = t["published"] if not by_server else (
            t["lastSeq"] - t["firstSeq"] + 1 if t["lastSeq"] else 0
        )
        publishes += p
        expected += p * t["subscribers"]
        delivered += t["delivered"]
        dups += t["duplicates"]
    secs = c.get("measuredSecs") or 0
    figures = (c.get("figures") or {}).get("fanout") or {}
    latency = figures.get("latency")
    if latency and latency.get("count"):
        p50, p99, p999 = latency["p50"], latency["p99"], latency["p999"]
    elif c.get("hists", {}).get("fanout"):
        p50, p99, p999 = percentiles(hist_counts(c["hists"]["fanout"]), [0.5, 0.99, 0.999])
    else:
        p50 = p99 = p999 = None
    counts = c["counts"]
    unmeasured = ((r.get("verdict") or {}).get("unmeasured")) or []
    failed = sum((counts.get("failed") or {}).values()) + sum((counts.get("dropped") or {}).values())
    return {
        "subscribers": c["connections"],
        "publishes": publishes,
        "publishes_per_sec": publishes / secs if secs else 0,
        "deliveries_per_sec": delivered / secs if secs else 0,
        "expected": expected,
        "delivered": delivered,
        "completeness": delivered / expected if expected else None,
        "gaps": max(expected - delivered, 0),
        "duplicates": dups,
        "p50": p50,
        "p99": p99,
        "p999": p999,
        "failed": failed,
        "server": c.get("serverTopics"),
        # What the subscribers read in the window, whenever published, and what the
        # publishers' pace owed them: a client behind reads less than it is owed.
        "read_per_sec": figures.get("readPerSec"),
        "owed_per_sec": figures.get("owedPerSec"),
        "behind": counts.get("behind", 0),
        "unmeasured": len(unmeasured),
        # The cell's start (its warm-up's, Unix seconds) and measured seconds: run.sh reads
        # the client's CPU over the window from them.
        "started": (c.get("startedFirstMicros") or 0) / 1e6,
        "measured_secs": secs,
    }


if __name__ == "__main__":
    print(json.dumps(row(sys.argv[1])))
