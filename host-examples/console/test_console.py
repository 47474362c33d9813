"""The operator console (`heart-fleet serve`) over real HTTP, against a seeded SQLite store
and a real PostgreSQL behind a proxy that can be cut.

    python3 test_console.py seed DIR          # seed DIR/store.db, print the seeded ids as JSON
    python3 test_console.py api DIR           # the API, metrics and error checks (needs the seed)
    python3 test_console.py outage            # 503 and heart_fleet_store_up 0 while PostgreSQL
                                              # is cut off, recovery after (needs DATABASE_URL)

HEART_FLEET_CLI names the binary. /metrics is parsed with prometheus_client's own parser.
Every check that refuses something also checks that nothing changed in the store.
"""

import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

CLI = os.environ.get("HEART_FLEET_CLI", "heart-fleet")
TOKEN = "console-test-token-7d1f"


def cli(store, *args):
    out = subprocess.run([CLI, "--store", store, *args], check=True, capture_output=True, text=True)
    return out.stdout


def iso(offset_ms):
    t = time.time() + offset_ms / 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%03dZ" % (int(t * 1000) % 1000)


def seed(directory):
    """A live lease, an expired one, a quarantined run, a dead instance, a tampered receipt."""
    db = os.path.join(directory, "store.db")
    store = f"sqlite:{db}"
    cli(store, "migrate")

    def create(key):
        return json.loads(cli(store, "runs", "create", key, "--objective", f"console test {key}"))["run"]["id"]

    doomed, live, expired = create("console/doomed"), create("console/live"), create("console/expired")
    cli(store, "instances", "register", "worker-dead", "--hostname", "box-1", "--pid", "4242")
    cli(store, "instances", "register", "worker-a", "--hostname", "box-2", "--pid", "4343")
    con = sqlite3.connect(db)
    with con:
        # Held past its expiry with retries at the ceiling: the sweep quarantines it.
        con.execute(
            "UPDATE agent_runs SET status='leased', lease_owner='worker-dead', lease_expires_at=?, retries=5 WHERE id=?",
            (iso(-120_000), doomed),
        )
        con.execute("UPDATE agent_instances SET last_heartbeat=? WHERE instance_id='worker-dead'", (iso(-3_600_000),))
    cli(store, "reclaim", "--max-retries", "5", "--liveness-ttl-ms", "600000")
    # The canary leaves acquired/released receipts on a run of its own; one of them is edited.
    cli(store, "canary")
    with con:
        con.execute(
            "UPDATE agent_runs SET status='leased', lease_owner='worker-a', lease_expires_at=? WHERE id=?",
            (iso(600_000), live),
        )
        con.execute(
            "UPDATE agent_runs SET status='leased', lease_owner='worker-b', lease_expires_at=? WHERE id=?",
            (iso(-90_000), expired),
        )
        canary = con.execute("SELECT run_id FROM heart_receipts WHERE event='acquired' ORDER BY id").fetchone()[0]
        first = con.execute("SELECT min(id) FROM heart_receipts WHERE run_id=?", (canary,)).fetchone()[0]
        con.execute(
            "UPDATE heart_receipts SET receipt=json_set(receipt, '$.owner', 'mallory') WHERE id=?", (first,)
        )
    status = dict(con.execute("SELECT id, status FROM agent_runs").fetchall())
    assert status[doomed] == "quarantined", status
    instances = dict(con.execute("SELECT instance_id, status FROM agent_instances").fetchall())
    assert instances == {"worker-dead": "dead", "worker-a": "alive"}, instances
    con.close()
    return {"store": store, "db": db, "quarantined": doomed, "live": live, "expired": expired, "tampered": canary}


class Server:
    """`heart-fleet serve` on a free loopback port; its stderr lines are kept."""

    def __init__(self, store, *args):
        self.proc = subprocess.Popen(
            [CLI, "--store", store, "serve", "--listen", "127.0.0.1:0", *args],
            stderr=subprocess.PIPE,
            text=True,
        )
        banner = self.proc.stderr.readline()
        assert banner.startswith("heart-fleet: serving http://"), banner
        self.banner = banner
        self.base = banner.split()[2]
        self.lines = []
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            self.lines.append(line)

    def request(self, method, path, body=None, token=None, raw=None):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.headers, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read().decode()

    def json(self, method, path, **kw):
        status, _, text = self.request(method, path, **kw)
        return status, json.loads(text)

    def stop(self):
        self.proc.terminate()
        code = self.proc.wait(timeout=20)
        if code != 0:
            print("".join(l for l in self.lines if "panicked" in l or "Cannot" in l or "cannot" in l), file=sys.stderr)
        assert code == 0, f"serve exited {code} on SIGTERM"


def families(text):
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(fams, family, **labels):
    for s in fams[family].samples:
        if all(s.labels.get(k) == v for k, v in labels.items()) and s.name in (family, family + "_total"):
            return s.value
    raise AssertionError(f"no sample {family}{labels}")


def rows(db):
    con = sqlite3.connect(db)
    try:
        return (
            con.execute("SELECT * FROM agent_runs ORDER BY id").fetchall(),
            con.execute("SELECT * FROM agent_instances ORDER BY instance_id").fetchall(),
            con.execute("SELECT count(*) FROM heart_receipts").fetchone()[0],
        )
    finally:
        con.close()


def check_api(directory):
    seeded = json.load(open(os.path.join(directory, "seed.json")))
    db = seeded["db"]
    token_file = os.path.join(directory, "token")
    with open(token_file, "w") as f:
        f.write(TOKEN + "\n")

    # Read-only: every operator action is 403 and changes nothing.
    ro = Server(seeded["store"])
    try:
        before = rows(db)
        for path in (
            f"/api/runs/{seeded['quarantined']}/requeue",
            f"/api/runs/{seeded['live']}/force-release",
            "/api/instances/worker-a/drain",
        ):
            status, body = ro.json("POST", path, body={}, token=TOKEN)
            assert status == 403 and body["code"] == "forbidden", (path, status, body)
        assert rows(db) == before
        print("read-only console: every operator action 403 forbidden, nothing written")
    finally:
        ro.stop()

    srv = Server(seeded["store"], "--token-file", token_file)
    try:
        assert TOKEN not in srv.banner
        status, health = srv.json("GET", "/api/health")
        assert status == 200 and health["store"] == "up", health

        # /metrics through a real parser.
        status, headers, text = srv.request("GET", "/metrics")
        assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4"), headers
        fams = families(text)
        for name, kind in {
            "heart_fleet_runs": "gauge",
            "heart_fleet_instances": "gauge",
            "heart_fleet_receipts": "counter",
            "heart_fleet_leases": "gauge",
            "heart_fleet_quarantined_runs": "gauge",
            "heart_fleet_oldest_expired_lease_age_seconds": "gauge",
            "heart_fleet_store_up": "gauge",
            "heart_fleet_console_http_requests": "counter",
        }.items():
            assert name in fams, (name, sorted(fams))
            assert fams[name].type == kind, (name, fams[name].type)
            assert fams[name].documentation, f"{name} has no HELP"
        assert sample(fams, "heart_fleet_store_up") == 1
        assert sample(fams, "heart_fleet_runs", status="quarantined") == 1
        assert sample(fams, "heart_fleet_quarantined_runs") == 1
        assert sample(fams, "heart_fleet_leases", state="live") == 1
        assert sample(fams, "heart_fleet_leases", state="expired") == 1
        assert sample(fams, "heart_fleet_instances", status="dead") == 1
        assert sample(fams, "heart_fleet_receipts", event="quarantined") == 1
        age = sample(fams, "heart_fleet_oldest_expired_lease_age_seconds")
        assert 85 <= age <= 600, age
        print(f"/metrics: {len(fams)} families parsed by prometheus_client, the seeded numbers, oldest expired lease {age:.0f} s")

        # The JSON API.
        status, page = srv.json("GET", "/api/runs?status=quarantined")
        assert status == 200 and [r["id"] for r in page["runs"]] == [seeded["quarantined"]], page
        status, page1 = srv.json("GET", "/api/runs?limit=2")
        assert status == 200 and len(page1["runs"]) == 2 and page1["nextCursor"], page1
        status, page2 = srv.json("GET", "/api/runs?limit=2&cursor=" + urllib.parse.quote(page1["nextCursor"]))
        ids = [r["id"] for r in page1["runs"] + page2["runs"]]
        assert status == 200 and len(ids) == len(set(ids)) == 4 and page2["nextCursor"] is None, (page1, page2)
        status, run = srv.json("GET", f"/api/runs/{seeded['tampered']}")
        assert status == 200 and run["run"]["id"] == seeded["tampered"]
        marks = [(x["receipt"]["event"], x["verified"], x["tampered"]) for x in run["receipts"]]
        assert marks[0][1:] == (False, True), marks
        # The receipt after the edited one is intact, but its link now points at a receipt the
        # verifier threw out: a chain finding, not a tampered mark.
        assert marks[1:] == [("released", False, False)], marks
        assert [f["code"] for f in run["receipts"][1]["findings"]] == ["chain-gap"], run["receipts"][1]
        assert run["verification"]["passed"] is False, run["verification"]
        seqs = [x["receipt"]["seq"] for x in run["receipts"]]
        assert seqs == sorted(seqs), seqs
        status, inst = srv.json("GET", "/api/instances")
        dead = [i for i in inst["instances"] if i["instance_id"] == "worker-dead"][0]
        assert dead["status"] == "dead" and dead["heartbeatAgeMs"] >= 3_500_000, dead
        print("JSON API: status filter, cursor pages, a run with its receipts oldest first (the edited one tampered), instances")

        # Errors: typed, and nothing written.
        before = rows(db)
        cases = [
            ("GET", "/nope", None, None, 404, "not-found"),
            ("GET", "/api/runs?limit=0", None, None, 400, "invalid-input"),
            ("GET", "/api/runs?limit=abc", None, None, 400, "invalid-input"),
            ("GET", "/api/runs?status=sleeping", None, None, 400, "invalid-input"),
            ("GET", "/api/runs?colour=red", None, None, 400, "invalid-input"),
            ("GET", "/api/activity?minutes=99999", None, None, 400, "invalid-input"),
            ("GET", "/api/runs/00000000-0000-4000-8000-000000000000", None, None, 404, "run-not-found"),
            ("POST", f"/api/runs/{seeded['quarantined']}/requeue", {}, None, 401, "unauthorized"),
            ("POST", f"/api/runs/{seeded['quarantined']}/requeue", {}, "wrong-token", 401, "unauthorized"),
            ("POST", f"/api/runs/{seeded['live']}/force-release", {}, "wrong-token", 401, "unauthorized"),
            ("POST", "/api/instances/worker-a/drain", {}, None, 401, "unauthorized"),
            ("POST", f"/api/runs/{seeded['quarantined']}/requeue", {"operator": 7}, TOKEN, 400, "invalid-input"),
            ("POST", f"/api/runs/{seeded['quarantined']}/requeue", {"who": "x"}, TOKEN, 400, "invalid-input"),
            ("POST", f"/api/runs/{seeded['live']}/requeue", {}, TOKEN, 409, None),
        ]
        for method, path, body, token, want, code in cases:
            status, answer = srv.json(method, path, body=body, token=token)
            assert status == want, (method, path, status, answer)
            assert set(answer) >= {"code", "message"} and answer["message"], answer
            if code:
                assert answer["code"] == code, (path, answer)
        status, _, text = srv.request("POST", f"/api/runs/{seeded['quarantined']}/requeue", raw=b"x" * 100_000, token=TOKEN)
        assert status == 413, (status, text)
        assert rows(db) == before, "a refused request changed the store"
        print(f"errors: {len(cases) + 1} refusals (404, 400 invalid-input, 401, 409, 413), each {{code, message}}, nothing written")

        # A requeue with the token: ready, and the same receipt as the CLI verb, naming the operator.
        status, done = srv.json("POST", f"/api/runs/{seeded['quarantined']}/requeue", body={"operator": "alice"}, token=TOKEN)
        assert status == 200 and done["run"]["status"] == "ready" and done["run"]["retries"] == 0, done
        assert [r["event"] for r in done["receipts"]] == ["requeued"] and done["receipts"][0]["owner"] == "alice", done
        status, run = srv.json("GET", f"/api/runs/{seeded['quarantined']}")
        assert run["receipts"][-1]["receipt"]["event"] == "requeued" and run["verification"]["passed"], run
        print("requeue with the token: ready, receipt requeued naming the operator, the run's chain verifies")

        log = [l for l in srv.lines if " /api/" in l or " /metrics " in l or " /nope " in l]
        assert len(log) >= len(cases) + 8, srv.lines
        assert not any(TOKEN in l for l in srv.lines)
        print(f"one log line per request ({len(log)} lines), no token in the log")
    finally:
        srv.stop()


class Proxy:
    """A TCP proxy in front of PostgreSQL that can be cut (listener and connections closed)."""

    def __init__(self, target):
        self.target = target
        self.port = None
        self.conns = []
        self.listener = None

    def start(self):
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", self.port or 0))
        self.port = self.listener.getsockname()[1]
        self.listener.listen(64)
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    def _accept(self, listener):
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a, b):
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        # shutdown() wakes the accept() blocked in the other thread; close() alone would not.
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        for s in self.conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass
        self.conns = []


def check_outage():
    url = urllib.parse.urlsplit(os.environ["DATABASE_URL"])
    subprocess.run([CLI, "--store", os.environ["DATABASE_URL"], "migrate"], check=True, capture_output=True)
    proxy = Proxy((url.hostname, url.port or 5432))
    proxy.start()
    netloc = f"{url.username}:{url.password}@127.0.0.1:{proxy.port}"
    store = urllib.parse.urlunsplit((url.scheme, netloc, url.path, url.query, ""))
    srv = Server(store, "--store-deadline-ms", "2000")
    try:
        assert f"{url.username}:{url.password}@" not in srv.banner, srv.banner
        status, _ = srv.json("GET", "/api/summary")
        assert status == 200
        proxy.cut()
        for path in ("/api/health", "/api/runs", "/api/summary", "/api/instances"):
            status, body = srv.json("GET", path)
            assert status == 503 and body["code"].startswith("store-"), (path, status, body)
            assert f":{url.password}@" not in json.dumps(body)
        status, _, text = srv.request("GET", "/metrics")
        fams = families(text)
        assert status == 200 and sample(fams, "heart_fleet_store_up") == 0, text
        assert "heart_fleet_runs" not in fams, "a failed read must not show stale store numbers"
        assert sample(fams, "heart_fleet_console_store_read_errors") >= 1
        print("PostgreSQL cut off: /api/* 503 with a store-* code, /metrics heart_fleet_store_up 0, no password shown")
        proxy.start()
        deadline = time.time() + 20
        while True:
            status, _ = srv.json("GET", "/api/health")
            if status == 200 or time.time() > deadline:
                break
            time.sleep(0.2)
        assert status == 200, "the console did not recover when PostgreSQL came back"
        status, _, text = srv.request("GET", "/metrics")
        assert status == 200 and sample(families(text), "heart_fleet_store_up") == 1
        assert srv.proc.poll() is None
        assert not any("panick" in l for l in srv.lines), srv.lines
        print("PostgreSQL back: the same server answers 200 and heart_fleet_store_up 1")
    finally:
        srv.stop()
        proxy.cut()


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "seed":
        seeded = seed(sys.argv[2])
        with open(os.path.join(sys.argv[2], "seed.json"), "w") as f:
            json.dump(seeded, f)
        print(json.dumps(seeded))
    elif what == "api":
        check_api(sys.argv[2])
    elif what == "outage":
        check_outage()
    else:
        raise SystemExit(f"unknown check {what!r}")
