"""Concurrent scrapers of a running `heart-fleet serve`'s /metrics (the console's load test).

    python3 load.py BASE_URL SERVER_PID [--scrapers 200] [--seconds 30] [--expect-runs N]

Each scraper is a thread with one keep-alive HTTP/1.1 connection that scrapes back to back.
Prints one JSON object: scrapes, scrapes per second, latency percentiles (ms), failures by
kind, the store reads the server made for them (its own heart_fleet_console_store_reads_total),
and the server's peak resident memory. Every answer must be 200 with heart_fleet_store_up 1;
the last answer of each scraper is parsed by prometheus_client and, with --expect-runs, its
heart_fleet_runs must add up to N. Exit 1 when any scrape failed.
"""

import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse

from prometheus_client.parser import text_string_to_metric_families


def value(text, family, sample=None):
    for fam in text_string_to_metric_families(text):
        if fam.name == family:
            return sum(s.value for s in fam.samples if sample is None or s.name == sample)
    raise AssertionError(f"no family {family}")


def peak_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return None


def scrape_once(base):
    url = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    conn.request("GET", "/metrics")
    r = conn.getresponse()
    body = r.read().decode()
    conn.close()
    assert r.status == 200, (r.status, body[:200])
    return body


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("pid", type=int)
    ap.add_argument("--scrapers", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--expect-runs", type=int)
    args = ap.parse_args()
    url = urllib.parse.urlsplit(args.base)

    reads_before = value(scrape_once(args.base), "heart_fleet_console_store_reads", "heart_fleet_console_store_reads_total")
    latencies, failures, last = [], {}, [None] * args.scrapers
    lock = threading.Lock()
    start = threading.Barrier(args.scrapers + 1)
    deadline = [0.0]

    def scraper(i):
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        mine = []
        start.wait()
        while time.monotonic() < deadline[0]:
            t0 = time.perf_counter()
            try:
                conn.request("GET", "/metrics")
                r = conn.getresponse()
                body = r.read()
                kind = None if r.status == 200 and b"\nheart_fleet_store_up 1" in body else f"status {r.status}"
            except (OSError, http.client.HTTPException) as e:
                kind, body = type(e).__name__, None
                conn.close()
                conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
            mine.append((time.perf_counter() - t0) * 1000)
            if kind:
                with lock:
                    failures[kind] = failures.get(kind, 0) + 1
            elif body is not None:
                last[i] = body
        conn.close()
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=scraper, args=(i,), daemon=True) for i in range(args.scrapers)]
    for t in threads:
        t.start()
    deadline[0] = time.monotonic() + args.seconds
    t0 = time.monotonic()
    start.wait()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0

    reads_after = value(scrape_once(args.base), "heart_fleet_console_store_reads", "heart_fleet_console_store_reads_total")
    checked = 0
    for body in last:
        if body is None:
            failures["scraper without a good answer"] = failures.get("scraper without a good answer", 0) + 1
            continue
        text = body.decode()
        if args.expect_runs is not None:
            runs = value(text, "heart_fleet_runs")
            assert runs == args.expect_runs, f"heart_fleet_runs adds up to {runs}, not {args.expect_runs}"
        checked += 1
    latencies.sort()

    def pct(p):
        return round(latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))], 1) if latencies else None

    report = {
        "scrapers": args.scrapers,
        "seconds": round(elapsed, 1),
        "scrapes": len(latencies),
        "scrapes_per_s": round(len(latencies) / elapsed, 1),
        "latency_ms": {"p50": pct(50), "p95": pct(95), "p99": pct(99), "max": pct(100)},
        "failures": failures,
        "store_reads": int(reads_after - reads_before) - 1,
        "answers_parsed": checked,
        "server_peak_rss_kib": peak_rss_kib(args.pid),
    }
    print(json.dumps(report))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
