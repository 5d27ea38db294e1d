# SPDX-License-Identifier: MIT
"""Check cofferd's Prometheus exposition with the reference parser.

usage: metrics_check.py BEFORE AFTER [HOST:PORT]

BEFORE and AFTER are `coffer stats --prometheus` outputs taken around one
64 KiB write and three 64 KiB reads of tank/a. Both must parse with
prometheus_client's text parser; every histogram must hold (buckets
cumulative in le order, +Inf == _count); counters never go back, and the
ones of that I/O moved by what was done. With HOST:PORT, GET /metrics there
must answer 200 in the 0.0.4 text format and parse the same way, any other
path 404 and POST 405. Every metric contrib/grafana-coffer.json
($COFFER_DASHBOARD) queries must be one of AFTER's. Exit 0, 1 (a finding, printed), 77 (no parser).
"""
import os
import re
import sys
import urllib.error
import urllib.request

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    print("python3-prometheus-client is not installed")
    sys.exit(77)

bad = []


def parse(text, what):
    fams = {}
    for fam in text_string_to_metric_families(text):
        if fam.name in fams:
            bad.append(f"{what}: family {fam.name} twice")
        fams[fam.name] = fam
    return fams


def key(s):
    return (s.name, tuple(sorted(s.labels.items())))


def values(fams):
    return {key(s): s.value for f in fams.values() for s in f.samples}


def check_histograms(fams, what):
    n = 0
    for fam in fams.values():
        if fam.type != "histogram":
            continue
        series = {}
        for s in fam.samples:
            lab = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
            series.setdefault(lab, {"buckets": [], "count": None, "sum": None})
            if s.name.endswith("_bucket"):
                series[lab]["buckets"].append((float(s.labels["le"]), s.value))
            elif s.name.endswith("_count"):
                series[lab]["count"] = s.value
            elif s.name.endswith("_sum"):
                series[lab]["sum"] = s.value
        for lab, h in series.items():
            n += 1
            b = h["buckets"]
            les = [le for le, _ in b]
            if les != sorted(les) or not b or b[-1][0] != float("inf"):
                bad.append(f"{what}: {fam.name}{lab}: le not ascending to +Inf")
            if any(b[i][1] > b[i + 1][1] for i in range(len(b) - 1)):
                bad.append(f"{what}: {fam.name}{lab}: buckets not cumulative")
            if h["count"] is None or b[-1][1] != h["count"]:
                bad.append(f"{what}: {fam.name}{lab}: +Inf {b[-1][1]} != _count {h['count']}")
            if h["sum"] is None or h["sum"] < 0:
                bad.append(f"{what}: {fam.name}{lab}: no _sum")
    if n == 0:
        bad.append(f"{what}: no histogram")


def get(url, method="GET"):
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, "", ""


def main():
    before = parse(open(sys.argv[1]).read(), "before")
    after = parse(open(sys.argv[2]).read(), "after")
    for fams, what in ((before, "before"), (after, "after")):
        check_histograms(fams, what)
    b, a = values(before), values(after)
    for fam in after.values():
        if fam.type not in ("counter", "histogram"):
            continue
        for s in fam.samples:
            k = key(s)
            if k in b and s.value < b[k]:
                bad.append(f"{k}: went back from {b[k]} to {s.value}")

    def moved(name, by, **labels):
        k = (name, tuple(sorted(labels.items())))
        if k not in a:
            bad.append(f"after: no {k}")
        elif a[k] - b.get(k, 0) != by:
            bad.append(f"{k}: moved by {a[k] - b.get(k, 0)}, not {by}")

    ds = {"pool": "tank", "dataset": "tank/a"}
    moved("coffer_dataset_ops_total", 1, op="write", **ds)
    moved("coffer_dataset_ops_total", 3, op="read", **ds)
    moved("coffer_dataset_bytes_total", 65536, op="write", **ds)
    moved("coffer_dataset_bytes_total", 3 * 65536, op="read", **ds)
    moved("coffer_dataset_latency_seconds_count", 3, op="read", **ds)
    moved("coffer_dataset_latency_seconds_count", 1, op="write", **ds)
    moved("coffer_pool_ops_total", 1, op="write", pool="tank")
    moved("coffer_pool_latency_seconds_count", 3, op="read", pool="tank")
    if a.get(("coffer_pool_state", (("pool", "tank"), ("state", "ONLINE")))) != 1:
        bad.append("tank is not ONLINE")
    if not any(k[0] == "coffer_lun_size_bytes" for k in a):
        bad.append("no per-LUN rows")

    dash = os.environ.get("COFFER_DASHBOARD")
    if dash:
        names = {k[0] for k in a}
        for m in sorted(set(re.findall(r"coffer_[a-z_]+", open(dash).read()))):
            if m not in names and m != "coffer_overview":
                bad.append(f"{dash}: {m} is no metric cofferd exports")
    if len(sys.argv) > 3:
        base = f"http://{sys.argv[3]}"
        st, ctype, body = get(base + "/metrics")
        if st != 200 or not ctype.startswith("text/plain; version=0.0.4"):
            bad.append(f"GET /metrics: {st} {ctype}")
        http = parse(body, "http")
        check_histograms(http, "http")
        if set(http) != set(after):
            bad.append(f"http and coffer differ in families: {set(http) ^ set(after)}")
        st, _, _ = get(base + "/")
        if st != 404:
            bad.append(f"GET /: {st}, not 404")
        st, _, _ = get(base + "/metrics", "POST")
        if st != 405:
            bad.append(f"POST /metrics: {st}, not 405")
    for line in bad:
        print(line)
    return 1 if bad else 0


sys.exit(main())
