import json, os, sys
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
R = "00000000-0000-4000-8000-000000000001"
R2 = "00000000-0000-4000-8000-000000000002"
T0 = "2026-07-30T00:00:00.000Z"
G = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), '../../../core/tests/vectors/golden-vectors.json')))
def run(id=R, **kw):
    d = {"id": id, "assignment_id": "assign:" + id, "objective": "property test", "idempotency_key": "prop:run:" + id[-1], "created_by": "test", "status": "ready"}
    d.update(kw); return d
def iso(s): return "2026-07-30T" + s + "Z"
out = []
def sc(name, source, description, steps, expect=None, runs=None, fix=None, config=None, instances=None, intents=None, clock=T0):
    d = {"format": 1, "name": name, "source": source, "fix": fix, "description": description, "clock": clock,
         "config": config if config is not None else {"maxRetries": 5},
         "runs": runs if runs is not None else [run()]}
    if instances: d["instances"] = instances
    if intents: d["intents"] = intents
    d["steps"] = steps
    d["expect"] = expect or {}
    out.append(d)
def acq(owner, ttl=60, save=None, expect=None, rid=R):
    s = {"op": "acquire", "args": {"runId": rid, "owner": owner, "ttlSeconds": ttl}}
    if save: s["save"] = save
    if expect is not None: s["expect"] = expect
    return s
def adv(ms): return {"op": "advance", "args": {"ms": ms}}
def reclaim(expect=None, limit=None):
    s = {"op": "reclaimExpired", "args": ({"limit": limit} if limit else {})}
    if expect is not None: s["expect"] = expect
    return s
def op(name, expect=None, save=None, **args):
    s = {"op": name, "args": args}
    if expect is not None: s["expect"] = expect
    if save: s["save"] = save
    return s
OMIT = object()
def rec(ev, owner, exp=OMIT, key=None, at=None, rid=R):
    d = {"event": ev, "runId": rid, "owner": owner, "effectKey": key}
    if exp is not OMIT: d["leaseExpiresAt"] = exp
    elif ev in ("released", "reclaimed", "quarantined", "requeued", "force_released"): d["leaseExpiresAt"] = None
    if at: d["at"] = at
    return d
M0 = {k: 0 for k in ["acquireAttempts","acquireWins","acquireCollisions","renews","renewFailures","releases","releaseFailures","reclaims","quarantines","fenceVerifications","fenceRejections","effectCommits","effectDedupes"]}
def metrics(**kw):
    m = dict(M0); m.update(kw); return m
WON = {"acquired": True}
LOST = {"acquired": False}

# ---------------- semantics §5.1 (the 24 property tests) ----------------
sc("p1-concurrent-acquires", "semantics §5.1 #1", "Two workers race for a ready run: exactly one wins; the loser's write misses and is explained by a read.",
   [acq("worker-A", expect=WON), acq("worker-B", expect={"acquired": False, "code": "lease-held", "reason": "Cannot acquire: status 'leased', lease not expired"})],
   {"metrics": metrics(acquireAttempts=2, acquireWins=1, acquireCollisions=1), "receipts": [rec("acquired", "worker-A", iso("00:01:00.000"))]})
sc("p1-second-execute-with-lease-is-held", "semantics §5.1 #2", "A holds a live lease; B's executeWithLease does not run its work.",
   [acq("worker-A"), op("executeWithLease", {"ran": False, "reason": "lease-held", "code": "lease-held"}, runId=R, owner="worker-B", ttlSeconds=60, work={"returns": "never"})],
   {"runs": [{"id": R, "status": "leased", "lease_owner": "worker-A"}]})
sc("p2-killed-worker-recovered", "semantics §5.1 #3", "A dies; after the expiry the sweep resets the run (retries 1) and B acquires it.",
   [acq("worker-A"), adv(61000), reclaim({"reclaimedCount": 1, "reclaimedIds": [R], "quarantinedIds": [], "errors": []}),
    {"op": "expectFired", "args": {}}, acq("worker-B", expect={"acquired": True, "run": {"retries": 1, "lease_owner": "worker-B"}})],
   {"receipts": [rec("acquired","worker-A"), rec("reclaimed","worker-A", None), rec("acquired","worker-B", iso("00:02:01.000"))], "metrics": metrics(acquireAttempts=2, acquireWins=2, reclaims=1)})
sc("p2-renewed-lease-survives", "semantics §5.1 #4", "A renews at +30 s; at +75 s (past the original expiry) the sweep leaves the run alone.",
   [acq("worker-A", save="fA"), adv(30000), op("renew", {"leaseExpiresAt": iso("00:01:30.000")}, fence="$fA", ttlSeconds=60), adv(45000), reclaim({"reclaimedCount": 0})],
   {"runs": [{"id": R, "status": "leased", "lease_expires_at": iso("00:01:30.000")}]})
steps = []
for n in range(3):
    steps += [acq(f"worker-{n}"), adv(61000)]
    steps.append(reclaim({"reclaimedCount": 1 if n < 2 else 0, "quarantinedIds": [] if n < 2 else [R]}))
steps.append(acq("worker-X", expect={"acquired": False, "code": "quarantined", "reason": "Cannot acquire: status 'quarantined', lease not expired"}))
sc("p2-retry-ceiling-quarantines", "semantics §5.1 #5; golden lifecycle retry-ceiling-quarantine", "maxRetries 2: reclaimed, reclaimed, then quarantined with retries 3; the quarantined run cannot be acquired.",
   steps, {"runs": [{"id": R, "status": "quarantined", "retries": 3, "lease_owner": None}], "metrics": metrics(acquireAttempts=4, acquireWins=3, acquireCollisions=1, reclaims=2, quarantines=1),
           "receipts": [rec("acquired","worker-0"), rec("reclaimed","worker-0"), rec("acquired","worker-1"), rec("reclaimed","worker-1"), rec("acquired","worker-2"), rec("quarantined","worker-2")]}, config={"maxRetries": 2})
stale = [acq("worker-A", save="fA"), adv(61000), reclaim(), acq("worker-B", save="fB")]
sc("p3-dead-fence-everywhere", "semantics §5.1 #6; golden lifecycle stale-fence-rejected", "After reclaim and re-acquire, A's token fails verify, renew and release; the row stays B's.",
   stale + [op("verifyFence", False, fence="$fA"), op("renew", None, fence="$fA", ttlSeconds=60), op("release", None, fence="$fA", nextStatus="completed"),
            op("guardIrreversible", {"committed": False, "reason": "fence-rejected", "code": "fence-rejected"}, fence="$fA", effectKey="send:tg:123", ledger="memory", effect={"returns": "x"}),
            {"op": "expectFired", "args": {"send:tg:123": 0}}],
   {"runs": [{"id": R, "status": "leased", "lease_owner": "worker-B", "retries": 1}], "metrics": metrics(acquireAttempts=2, acquireWins=2, renewFailures=1, releaseFailures=1, reclaims=1, fenceRejections=2),
    "receipts": [rec("acquired","worker-A"), rec("reclaimed","worker-A"), rec("acquired","worker-B"), rec("fence_rejected","worker-A",iso("00:01:00.000")), rec("fence_rejected","worker-A",iso("00:01:00.000")), rec("fence_rejected","worker-A",iso("00:01:00.000")), rec("fence_rejected","worker-A",iso("00:01:00.000"))]})
sc("p3-guard-on-stale-fence", "semantics §5.1 #7", "guardIrreversible with a superseded token never runs the effect.",
   stale + [op("guardIrreversible", {"committed": False, "reason": "fence-rejected"}, fence="$fA", effectKey="send:tg:123", ledger="durable", effect={"returns": "x"}), {"op": "expectFired", "args": {"send:tg:123": 0}}],
   {"intents": []})
sc("p3-zombie-window-verify", "semantics §5.1 #8", "A's lease expired but nobody reclaimed it: verify refuses the token.",
   [acq("worker-A", save="fA"), adv(61000), op("verifyFence", False, fence="$fA")], {"metrics": metrics(acquireAttempts=1, acquireWins=1, fenceRejections=1)})
sc("p4-crash-retry-dedupe", "semantics §5.1 #9; golden lifecycle effect-dedupe-across-crash; fix 4", "The effect fires once across a crash and a retry by another worker; effect receipts are emitted (fix 4).",
   [acq("worker-A", save="fA"), op("guardIrreversible", {"committed": True, "result": "external-done"}, fence="$fA", effectKey="spend:invoice:42", ledger="memory", effect={"returns": "external-done"}),
    adv(61000), reclaim(), acq("worker-B", save="fB"),
    op("guardIrreversible", {"committed": False, "reason": "already-committed", "code": "deduped"}, fence="$fB", effectKey="spend:invoice:42", ledger="memory", effect={"returns": "again"}),
    {"op": "expectFired", "args": {"spend:invoice:42": 1}}],
   {"metrics": metrics(acquireAttempts=2, acquireWins=2, reclaims=1, fenceVerifications=2, effectCommits=1, effectDedupes=1),
    "receipts": [rec("acquired","worker-A"), rec("fence_verified","worker-A",iso("00:01:00.000")), rec("effect_committed","worker-A",iso("00:01:00.000"),"spend:invoice:42"),
                 rec("reclaimed","worker-A"), rec("acquired","worker-B"), rec("fence_verified","worker-B",iso("00:02:01.000")), rec("effect_deduped","worker-B",iso("00:02:01.000"),"spend:invoice:42")]}, fix="fix-4")
sc("p4-distinct-keys-both-fire", "semantics §5.1 #10", "One token guards two different keys: both fire.",
   [acq("worker-A", save="fA"), op("guardIrreversible", {"committed": True}, fence="$fA", effectKey="effect:1", ledger="memory", effect={"returns": 1}),
    op("guardIrreversible", {"committed": True}, fence="$fA", effectKey="effect:2", ledger="memory", effect={"returns": 2}), {"op": "expectFired", "args": {"effect:1": 1, "effect:2": 1}}], {"metrics": {"effectCommits": 2}})
sc("p5-lifecycle", "semantics §5.1 #11; golden lifecycle execute-with-lease-happy-path", "executeWithLease: acquired then released, row completed.",
   [op("executeWithLease", {"ran": True, "result": "done", "released": True}, runId=R, owner="worker-A", ttlSeconds=60, work={"returns": "done"})],
   {"receipts": [dict(rec("acquired","worker-A",iso("00:01:00.000"),at=T0), digest="sha256:dreamnet-sorted-json:v0:b200a85a1c659d4fa561ec6d137840ea846ea42c2b357849d40e2a274eac7387"),
                 dict(rec("released","worker-A",None,at=T0), digest="sha256:dreamnet-sorted-json:v0:bdd8db9a8779f4a82b7d2eac48d06f05022a4885c08777fdf4788f59b129cafa", schemaVersion="zao.heart.receipt.v1")],
    "metrics": metrics(acquireAttempts=1, acquireWins=1, releases=1), "runs": [{"id": R, "status": "completed", "lease_owner": None, "lease_expires_at": None, "retries": 0, "updated_at": T0}]})
good = G["receipt_digests"][0]["receipt"]
bad = dict(good); bad["owner"] = "mallory"
sc("p5-tamper-evident", "semantics §5.1 #12", "Receipts verify; a receipt with a changed field does not (code receipt-tampered); `at` is not covered.",
   [op("verifyReceipt", True, receipt=good), op("verifyReceipt", {"error": "receipt-tampered"}, receipt=bad),
    op("verifyReceipt", True, receipt=dict(good, at="2099-01-01T00:00:00.000Z")), op("verifyReceipt", {"error": "invalid-input"}, receipt={"schemaVersion": "nope"})], {}, runs=[])
sc("p5-crash-recovery-order", "semantics §5.1 #13; golden lifecycle crash-recovery", "Events are exactly acquired, reclaimed, acquired, released; retries 1.",
   stale + [op("release", {"status": "completed"}, fence="$fB", nextStatus="completed")],
   {"receipts": [rec("acquired","worker-A",iso("00:01:00.000"),at=T0), rec("reclaimed","worker-A",None,at=iso("00:01:01.000")), rec("acquired","worker-B",iso("00:02:01.000")), rec("released","worker-B")],
    "runs": [{"id": R, "status": "completed", "retries": 1, "updated_at": iso("00:01:01.000")}], "metrics": metrics(acquireAttempts=2, acquireWins=2, releases=1, reclaims=1)})
steps = []
for c in G["canonicalize"]:
    if c["input_json"] is not None:
        steps.append(op("canonicalize", c["canonical"], json=c["input_json"]))
        steps.append(op("digest", c["digest"], json=c["input_json"]))
for c in G["canonicalize_errors"]:
    pass
steps.append(op("canonicalize", {"error": "invalid-input", "message": "Canonical JSON Error: Non-finite number Infinity cannot be serialized."}, json="[1e400]"))
sc("canonical-golden-vectors", "semantics §5.1 #14-23 (fixture pins; the upstream inputs are not in this repository, so every JSON-expressible golden canonicalize vector stands in)", "canonicalize and digest of every golden vector with JSON input.", steps, runs=[])
steps = [op("deterministicResourceId", d["id"], kind=d["kind"], key=d["key"]) for d in G["deterministic_resource_ids"]]
steps += [op("deterministicResourceId", {"error": "invalid-input", "message": e["message"]}, kind=e["kind"], key=e["key"]) for e in G["deterministic_resource_id_errors"]]
steps += [op("effectKey", e["effect_key"], prefix=e["prefix"], identity=e["identity"]) for e in G["effect_keys"]]
sc("deterministic-ids-and-effect-keys", "semantics §5.1 #24, §3.7", "deterministicResourceId and effectKey match the golden vectors; (a,b) differs from (b,a).",
   steps + [op("deterministicResourceId", "heart:resource:feafc855c8ea80bff32ad3d81a37a199ae66bc65d256288bd91683ffd8438bed", kind="zoe.heart.canary", key="singleton")], runs=[])
steps = []
for d in G["receipt_digests"]:
    steps.append(op("verifyReceipt", True, receipt=d["receipt"]))
sc("receipt-digest-vectors", "semantics §3.6; golden receipt_digests", "Every golden receipt verifies.", steps, runs=[])

# ---------------- liveness §5.2 ----------------
NOW = "2026-07-30T10:00:00.000Z"
def ago(s): 
    import datetime
    t = datetime.datetime(2026,7,30,10,0,0) - datetime.timedelta(milliseconds=int(s*1000))
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond//1000:03d}Z"
lease = {"status": "leased", "lease_expires_at": "2026-07-30T11:00:00.000Z"}
sc("liveness-reclaims-dead-instance-runs", "semantics §5.2 #4", "dead-1 is silent 200 s: its run is reclaimed (retries 1, receipt names the dead owner); live-1's run stays.",
   [op("livenessSweep", {"deadInstanceIds": ["dead-1"], "reclaimedCount": 1, "reclaimedIds": ["r1"], "errors": []})],
   {"runs": [{"id": "r1", "status": "ready", "retries": 1, "lease_owner": None}, {"id": "r2", "status": "leased", "lease_owner": "live-1"}],
    "instances": [{"instance_id": "dead-1", "status": "dead"}, {"instance_id": "live-1", "status": "alive"}], "receipts": [rec("reclaimed", "dead-1", rid="r1")], "metrics": {"reclaims": 1}},
   runs=[run("r1", lease_owner="dead-1", **lease), run("r2", lease_owner="live-1", **lease)], instances=[{"instance_id": "dead-1", "last_heartbeat": ago(200)}, {"instance_id": "live-1", "last_heartbeat": ago(5)}], clock=NOW, fix="fix-3")
sc("liveness-no-dead-instances", "semantics §5.2 #6", "Only live instances: nothing is reclaimed.",
   [op("livenessSweep", {"deadInstanceIds": [], "reclaimedCount": 0})], {}, runs=[run("r1", lease_owner="live-1", **lease)], instances=[{"instance_id": "live-1", "last_heartbeat": ago(5)}], clock=NOW)
lv = G["liveness_traces"][0]
sc("liveness-90s-boundary-and-draining", "golden liveness_traces liveness-mixed; semantics §2.13", "Exactly 90 s silent is alive (strict >); 90.001 s is dead; draining is live until stale; a waiting_approval run of a dead instance is left alone.",
   [op("livenessSweep", {"deadInstanceIds": ["dead-1", "draining-200", "edge-90.001"], "reclaimedCount": 3, "reclaimedIds": ["r1", "r2", "r5"]})],
   {"runs": [{"id": "r1", "status": "ready", "retries": 1}, {"id": "r2", "status": "ready", "retries": 5}, {"id": "r3", "status": "waiting_approval", "lease_owner": "dead-1"},
             {"id": "r4", "status": "leased", "lease_owner": "live-1"}, {"id": "r5", "status": "ready", "retries": 1}, {"id": "r6", "status": "leased", "lease_owner": "edge-90"}],
    "instances": [{"instance_id": "dead-1", "status": "dead"}, {"instance_id": "draining-200", "status": "dead"}, {"instance_id": "draining-5", "status": "draining"},
                  {"instance_id": "edge-90", "status": "alive"}, {"instance_id": "edge-90.001", "status": "dead"}, {"instance_id": "live-1", "status": "alive"}]},
   runs=[run("r1", lease_owner="dead-1", **lease), run("r2", lease_owner="dead-1", retries=4, **lease), run("r3", status="waiting_approval", lease_owner="dead-1"),
         run("r4", lease_owner="live-1", **lease), run("r5", lease_owner="draining-200", **lease), run("r6", lease_owner="edge-90", **lease)],
   instances=[{"instance_id": "dead-1", "last_heartbeat": ago(200)}, {"instance_id": "edge-90", "last_heartbeat": ago(90)}, {"instance_id": "edge-90.001", "last_heartbeat": ago(90.001)},
              {"instance_id": "draining-5", "status": "draining", "last_heartbeat": ago(5)}, {"instance_id": "draining-200", "status": "draining", "last_heartbeat": ago(200)}, {"instance_id": "live-1", "last_heartbeat": ago(1)}],
   config={"maxRetries": None}, clock=NOW)
sc("liveness-second-pass-finds-leftovers", "semantics §2.13 SURPRISE (fixed)", "Runs of an instance declared dead in an earlier pass are still found by the next pass (the reference never finds them again).",
   [op("livenessSweep", {"deadInstanceIds": ["dead-1"], "reclaimedIds": ["r1"]}, limit=1), op("livenessSweep", {"deadInstanceIds": [], "reclaimedIds": ["r2"]}, limit=1)],
   {"runs": [{"id": "r1", "status": "ready"}, {"id": "r2", "status": "ready"}]},
   runs=[run("r1", lease_owner="dead-1", **lease), run("r2", lease_owner="dead-1", status="leased", lease_expires_at="2026-07-30T12:00:00.000Z")], instances=[{"instance_id": "dead-1", "last_heartbeat": ago(200)}], clock=NOW)
sc("liveness-instance-lifecycle", "semantics §2.13 (register, heartbeat, drain)", "Register, heartbeat, drain; a dead instance must re-register before its heartbeats count.",
   [op("registerInstance", {"instance_id": "w1", "status": "alive", "last_heartbeat": NOW}, instanceId="w1"), adv(30000), op("heartbeatInstance", True, instanceId="w1"),
    op("drainInstance", True, instanceId="w1"), adv(91000), op("livenessSweep", {"deadInstanceIds": ["w1"]}), op("heartbeatInstance", False, instanceId="w1"),
    op("registerInstance", {"status": "alive"}, instanceId="w1"), op("heartbeatInstance", False, instanceId="nobody"), op("registerInstance", {"error": "invalid-input"}, instanceId="")],
   {"instances": [{"instance_id": "w1", "status": "alive"}]}, runs=[], clock=NOW)

# ---------------- transactional outbox §5.4 ----------------
PAY = {"chatId": 1, "text": "hi"}
KEY = [e for e in G["outbox_traces"] if e["name"] == "sendOnce-happy-then-dedupe"][0]["final_intents"][0]["effect_key"]
sc("outbox-send-once-happy-then-dedupe", "semantics §5.4 #1-2; golden outbox sendOnce-happy-then-dedupe; fix 4, fix 5", "verify → claim → dispatch → send → commit; the retry dedupes; effect receipts and counters (fix 4).",
   [acq("worker-A", save="fA"), op("sendOnce", {"sent": True, "externalRef": {"message_id": 42}, "committed": True}, fence="$fA", channel="telegram", effectKey=KEY, payload=PAY, send={"returns": {"message_id": 42}}),
    op("sendOnce", {"sent": False, "reason": "deduped", "code": "deduped"}, fence="$fA", channel="telegram", effectKey=KEY, payload=PAY, send={"returns": {"message_id": 43}}), {"op": "expectFired", "args": {KEY: 1}}],
   {"intents": [{"state": "committed", "fence_owner": "worker-A", "fence_expires_at": iso("00:01:00.000"), "fence_epoch": 1, "external_ref": {"message_id": 42}, "attempts": 0, "committed_at": T0, "channel": "telegram",
                 "payload_digest": "sha256:dreamnet-sorted-json:v0:" + KEY.split(":")[1]}],
    "dispatchLog": [{"attempt": 0, "outcome": "claimed", "detail": {"channel": "telegram"}}, {"attempt": 1, "outcome": "sent", "detail": {"message_id": 42}}, {"attempt": 0, "outcome": "deduped", "detail": None}],
    "metrics": metrics(acquireAttempts=1, acquireWins=1, fenceVerifications=2, effectCommits=1, effectDedupes=1),
    "receipts": [rec("acquired","worker-A"), rec("fence_verified","worker-A"), rec("effect_committed","worker-A",iso("00:01:00.000"),KEY), rec("fence_verified","worker-A"), rec("effect_deduped","worker-A",iso("00:01:00.000"),KEY)]}, fix="fix-5")
sc("outbox-stale-fence-does-not-burn-key", "semantics §5.4 #3, §2.11 BUG (fixed); golden outbox sendOnce-stale-fence-burns-key", "A stale worker is refused before it claims, so the live holder's send still fires once (the reference burns the key).",
   stale + [op("sendOnce", {"sent": False, "reason": "fence-rejected"}, fence="$fA", channel="telegram", effectKey="telegram:stale", payload=PAY, send={"returns": {"message_id": 1}}),
            op("sendOnce", {"sent": True, "committed": True}, fence="$fB", channel="telegram", effectKey="telegram:stale", payload=PAY, send={"returns": {"message_id": 2}}), {"op": "expectFired", "args": {"telegram:stale": 1}}],
   {"intents": [{"state": "committed", "fence_owner": "worker-B", "external_ref": {"message_id": 2}}]}, fix="fix-5")
disp = {"run_id": R, "effect_key": "telegram:crashed", "state": "dispatched", "channel": "telegram", "payload_digest": "sha256:x", "fence_owner": "worker-A", "fence_expires_at": iso("00:01:00.000"), "fence_epoch": None,
        "external_ref": None, "attempts": 0, "last_error": None, "created_at": T0, "committed_at": None}
sc("outbox-crash-after-dispatch-dedupes", "semantics §5.4 #4", "A dispatched intent (the sender crashed after dispatch) is never resent by a retry: it dedupes and waits for the reconciler.",
   [acq("worker-A", save="fA"), adv(61000), reclaim(), acq("worker-B", save="fB"),
    op("sendOnce", {"sent": False, "reason": "deduped"}, fence="$fB", channel="telegram", effectKey="telegram:crashed", payload=PAY, send={"returns": {}}), {"op": "expectFired", "args": {"telegram:crashed": 0}},
    op("reconcileOutbox", {"scanned": 1, "left": 1})], {"intents": [{"state": "dispatched", "attempts": 1}]}, intents=[disp])
sc("outbox-effect-key-deterministic", "semantics §5.4 #5", "effectKey is independent of key order; different text gives a different key.",
   [op("effectKey", "telegram:78100bc355cc497c2f73ce04b8e02c672dda6b5f22913d19e769840a2b105691", prefix="telegram", identity={"text": "a", "chatId": 1}),
    op("effectKey", "telegram:78100bc355cc497c2f73ce04b8e02c672dda6b5f22913d19e769840a2b105691", prefix="telegram", identity={"chatId": 1, "text": "a"})], runs=[])
sc("outbox-reopened-intent-redispatches", "semantics §2.12 SURPRISE (fixed); golden outbox reopen-is-a-dead-end", "A reopened intent (proved not sent) is dispatched again by the run's current holder and fires once (the reference dedupes forever).",
   [acq("worker-A", save="fA"), op("sendOnce", {"error": "effect-failed"}, fence="$fA", channel="telegram", effectKey="telegram:retry", payload=PAY, send={"throws": "network"}), adv(61000),
    op("reconcileOutbox", {"scanned": 1, "reopened": 1}, probes={"telegram": "not-sent"}), reclaim(), acq("worker-B", save="fB"),
    op("sendOnce", {"sent": True, "committed": True}, fence="$fB", channel="telegram", effectKey="telegram:retry", payload=PAY, send={"returns": {"message_id": 7}}),
    op("sendOnce", {"sent": False, "reason": "deduped"}, fence="$fB", channel="telegram", effectKey="telegram:retry", payload=PAY, send={"returns": {"message_id": 8}}),
    {"op": "expectFired", "args": {"telegram:retry": 2}}],
   {"intents": [{"state": "committed", "fence_owner": "worker-B", "external_ref": {"message_id": 7}, "last_error": None}]}, fix="fix-5")
sc("durable-record-once", "golden outbox durable-recordOnce", "guardIrreversible over the durable ledger: the key is claimed as an internal intent; the retry dedupes.",
   [acq("worker-A", save="fA"), op("guardIrreversible", {"committed": True, "result": "ok"}, fence="$fA", effectKey="spend:invoice:42", ledger="durable", effect={"returns": "ok"}),
    op("guardIrreversible", {"committed": False, "reason": "already-committed"}, fence="$fA", effectKey="spend:invoice:42", ledger="durable", effect={"returns": "ok"})],
   {"intents": [{"state": "intent", "channel": "internal", "payload_digest": "", "effect_key": "spend:invoice:42"}], "metrics": {"fenceVerifications": 2, "effectCommits": 1, "effectDedupes": 1}})

# ---------------- reconcile §5.5 ----------------
RT = "2026-07-30T10:00:00.000Z"
def di(key, channel, attempts=0):
    return {"run_id": R, "effect_key": key, "state": "dispatched", "channel": channel, "payload_digest": "sha256:y", "fence_owner": "worker-A", "fence_expires_at": "2026-07-30T09:00:00.000Z",
            "fence_epoch": None, "external_ref": None, "attempts": attempts, "last_error": None, "created_at": "2026-07-30T08:00:00.000Z", "committed_at": None}
sc("reconcile-probe-sent-commits", "semantics §5.5 #1; golden outbox reconcile-probe-sent", "The probe finds the cast: the intent is committed with the recovered evidence, logged (1, sent), counted, with an effect_committed receipt.",
   [op("reconcileOutbox", {"scanned": 1, "committed": 1, "reopened": 0, "abandoned": 0, "left": 0, "errors": []}, probes={"farcaster": {"sent": {"cast_hash": "0xabc"}}})],
   {"intents": [{"state": "committed", "external_ref": {"cast_hash": "0xabc"}, "committed_at": RT}], "dispatchLog": [{"attempt": 1, "outcome": "sent", "detail": {"cast_hash": "0xabc"}}],
    "receipts": [rec("effect_committed", "worker-A", "2026-07-30T09:00:00.000Z", "farcaster:cast:1")], "metrics": {"effectCommits": 1}},
   intents=[di("farcaster:cast:1", "farcaster", 1)], clock=RT)
sc("reconcile-probe-not-sent-reopens", "semantics §5.5 #2", "Provably not sent: the intent goes back to `intent`, fence cleared, reason recorded.",
   [op("reconcileOutbox", {"scanned": 1, "reopened": 1}, probes={"telegram": "not-sent"})],
   {"intents": [{"state": "intent", "fence_owner": None, "fence_expires_at": None, "last_error": "reconciler: provably not sent, reopened for retry"}], "dispatchLog": [{"attempt": 0, "outcome": "reconciled", "detail": {"reopened": True}}]},
   intents=[di("telegram:1", "telegram")], clock=RT)
sc("reconcile-unknown-is-left", "semantics §5.5 #3", "No probe for telegram, attempts 2 < 5: left, attempts 3.",
   [op("reconcileOutbox", {"scanned": 1, "left": 1, "abandoned": 0})], {"intents": [{"state": "dispatched", "attempts": 3}], "dispatchLog": []}, intents=[di("telegram:1", "telegram", 2)], clock=RT)
sc("reconcile-abandons-at-ceiling", "semantics §5.5 #4", "attempts 5 with maxAttempts 5: abandoned, never resent; the reason says at-most-once.",
   [op("reconcileOutbox", {"scanned": 1, "abandoned": 1}, maxAttempts=5)],
   {"intents": [{"state": "abandoned", "last_error": "reconciler: unverifiable send on 'telegram' past 5 attempts - abandoned (not resent, at-most-once)"}],
    "dispatchLog": [{"attempt": 0, "outcome": "abandoned", "detail": {"reason": "reconciler: unverifiable send on 'telegram' past 5 attempts - abandoned (not resent, at-most-once)"}}]}, intents=[di("telegram:1", "telegram", 5)], clock=RT)
sc("reconcile-multi-pass", "semantics §5.5 #5", "attempts 0, maxAttempts 2: left, left, abandoned.",
   [op("reconcileOutbox", {"left": 1}, maxAttempts=2), op("reconcileOutbox", {"left": 1}, maxAttempts=2), op("reconcileOutbox", {"abandoned": 1}, maxAttempts=2), op("reconcileOutbox", {"scanned": 0}, maxAttempts=2)],
   {"intents": [{"state": "abandoned", "attempts": 2}]}, intents=[di("telegram:1", "telegram", 0)], clock=RT)
sc("reconcile-nothing-stale", "semantics §5.5 #6", "No stale rows: scanned 0.", [op("reconcileOutbox", {"scanned": 0, "committed": 0, "reopened": 0, "abandoned": 0, "left": 0, "errors": []})], {}, clock=RT)
steps = [acq("worker-A", save="fA"), op("sendOnce", {"error": "effect-failed"}, fence="$fA", channel="telegram", effectKey="telegram:t", payload={"chatId": 1, "text": "x"}, send={"throws": "network"}), adv(61000)]
for p in range(5):
    steps.append(op("reconcileOutbox", {"scanned": 1, "left": 1}))
steps += [op("reconcileOutbox", {"scanned": 1, "abandoned": 1}), op("reconcileOutbox", {"scanned": 0})]
sc("send-throws-then-reconcile-until-abandoned", "golden outbox send-throws-then-reconcile-unknown-until-abandoned", "A send that throws leaves a dispatched intent; with no probe it is left on passes 1-5 and abandoned on pass 6.",
   steps, {"intents": [{"state": "abandoned", "attempts": 5, "fence_owner": "worker-A"}]})
sc("reconcile-probe-error-reported", "semantics §2.12", "A probe that throws is reported per intent and changes nothing.",
   [op("reconcileOutbox", {"scanned": 1, "errors": [{"effectKey": "telegram:1", "error": "rate limited"}]}, probes={"telegram": {"throws": "rate limited"}})],
   {"intents": [{"state": "dispatched", "attempts": 0}]}, intents=[di("telegram:1", "telegram")], clock=RT)

# ---------------- recovery suite §5.6 ----------------
RC = "2026-07-20T10:10:00.000Z"
held_w1 = dict(status="leased", lease_owner="w1", lease_expires_at="2026-07-20T10:05:00.000Z")
sc("recovery-crash-expiry-takeover", "semantics §5.6 #1, #7b", "w1's lease expired at 10:05; at 10:10 w2 takes over (fix 3: counted as a recovery).",
   [acq("w2", expect={"acquired": True, "run": {"lease_owner": "w2", "retries": 1}})], {"receipts": [rec("reclaimed", "w1"), rec("acquired", "w2")], "metrics": {"reclaims": 1, "acquireWins": 1}},
   runs=[run(**held_w1)], clock=RC, fix="fix-3")
sc("recovery-process-kill", "semantics §5.6 #2, #9", "A running run whose holder died: the sweep resets it (retries 2 → 3).",
   [reclaim({"reclaimedIds": [R]})], {"runs": [{"id": R, "status": "ready", "retries": 3, "lease_owner": None}]}, runs=[run(status="running", lease_owner="w1", lease_expires_at="2026-07-20T10:05:00.000Z", retries=2)], clock=RC)
sc("recovery-node-reboot", "semantics §5.6 #3, #14", "A node held several runs; all expired and are reclaimed; no ready run keeps an owner.",
   [reclaim({"reclaimedCount": 4})], {"runs": [{"id": f"r{i}", "status": "ready", "lease_owner": None, "lease_expires_at": None} for i in range(1, 5)]},
   runs=[run(f"r{i}", status="running", lease_owner="w1" if i < 3 else "w2", lease_expires_at="2026-07-20T10:05:00.000Z") for i in range(1, 5)], clock=RC)
sc("recovery-expiration-boundaries", "semantics §5.6 #4, #8", "canAcquire is false before the expiry and true after it.",
   [{"op": "setClock", "args": {"at": "2026-07-20T10:04:00.000Z"}}, acq("w2", expect={"acquired": False, "code": "lease-held"}), {"op": "setClock", "args": {"at": "2026-07-20T10:06:00.000Z"}}, acq("w2", expect=WON)],
   {}, runs=[run(**held_w1)], clock="2026-07-20T10:00:00.000Z")
sc("recovery-heartbeat-in-time", "semantics §5.6 #7a", "Renewed at 10:04 to 10:09: at 10:04:30 nobody can take it.",
   [acq("w1", ttl=300, save="f1"), adv(240000), op("renew", {"leaseExpiresAt": "2026-07-20T10:09:00.000Z"}, fence="$f1", ttlSeconds=300), adv(30000), acq("w2", expect={"acquired": False})],
   {}, clock="2026-07-20T10:00:00.000Z")
steps = []
for n in range(8):
    steps += [acq(f"w{n}"), adv(61000), reclaim({"reclaimedCount": 1})]
sc("recovery-unlimited-retries", "semantics §5.6 #10, §5.7 delegation", "With maxRetries unlimited, eight expire/reclaim cycles end ready with retries 8, never quarantined.",
   steps, {"runs": [{"id": R, "status": "ready", "retries": 8}], "metrics": {"quarantines": 0, "reclaims": 8}}, config={"maxRetries": None})
sc("recovery-restart", "semantics §5.6 #13", "After the reset, w3 acquires the ready run.", [reclaim({"reclaimedCount": 1}), acq("w3", expect={"acquired": True, "run": {"lease_owner": "w3"}})], {}, runs=[run(**held_w1)], clock=RC)

# ---------------- golden lifecycle traces ----------------
sc("acquire-failure-reasons", "golden lifecycle acquire-failure-reasons; fix 10", "Invalid input (no metric), Run not found (no collision), Collision/lease-held.",
   [acq("worker-A", rid="", expect={"acquired": False, "run": None, "reason": "Invalid input", "code": "invalid-input"}),
    acq("", expect={"acquired": False, "run": None, "reason": "Invalid input"}), acq("worker-A", ttl=0, expect={"reason": "Invalid input"}), acq("worker-A", ttl=31536001, expect={"reason": "Invalid input"}),
    acq("worker-A", ttl=-5, expect={"reason": "Invalid input"}),
    acq("worker-A", rid="missing-run", expect={"acquired": False, "run": None, "reason": "Run not found", "code": "run-not-found"}),
    acq("worker-A", expect=WON), acq("worker-B", expect={"acquired": False, "reason": "Cannot acquire: status 'leased', lease not expired", "run": {"lease_owner": "worker-A"}}),
    acq("worker-C", expect={"acquired": False, "code": "lease-held"})],
   {"metrics": metrics(acquireAttempts=4, acquireWins=1, acquireCollisions=2), "receipts": [rec("acquired", "worker-A")]}, fix="fix-10")
sc("execute-with-lease-failures", "golden lifecycle execute-with-lease-failures; §5.7", "lease-error for a missing run and invalid input; work throwing releases to failed and rethrows; a failed row is not re-acquirable.",
   [op("executeWithLease", {"ran": False, "reason": "lease-error", "code": "run-not-found"}, runId="missing", owner="worker-A", ttlSeconds=60, work={}),
    op("executeWithLease", {"ran": False, "reason": "lease-error", "code": "invalid-input"}, runId=R, owner="worker-A", ttlSeconds=0, work={}),
    op("executeWithLease", {"threw": "boom"}, runId=R, owner="worker-A", ttlSeconds=60, work={"throws": "boom"}),
    op("executeWithLease", {"ran": False, "reason": "lease-held"}, runId=R, owner="worker-B", ttlSeconds=60, work={})],
   {"runs": [{"id": R, "status": "failed", "lease_owner": None}], "metrics": metrics(acquireAttempts=3, acquireWins=1, acquireCollisions=1, releases=1), "receipts": [rec("acquired", "worker-A"), rec("released", "worker-A")]})
hb = G["heartbeat"]["trace"]
sc("heartbeat-rotation", "golden heartbeat.trace heartbeat-rotation; fix 4, fix 7", "Three beats rotate the token; the guard uses the current token; release uses the newest token.",
   [op("executeWithLease", {"ran": True, "result": "done", "released": True}, runId=R, owner="worker-A", ttlSeconds=60, work={"beats": [30000, 30000, 30000], "guard": {"effectKey": "k"}, "returns": "done"})],
   {"receipts": [{k: r[k] for k in ("event", "owner", "leaseExpiresAt", "at", "digest")} for r in hb["receipts"][:5]] + [rec("effect_committed", "worker-A", iso("00:02:30.000"), "k")] + [{k: hb["receipts"][5][k] for k in ("event", "leaseExpiresAt", "at", "digest")}],
    "metrics": dict(hb["metrics"]), "runs": [{"id": R, "status": "completed", "updated_at": iso("00:01:30.000")}]}, fix="fix-7")
sc("heartbeat-no-release-race", "golden heartbeat.race_trace (fixed); fix 7", "A beat that renews right before the work ends does not make the release use a stale token: the row is completed, no fence_rejected.",
   [op("executeWithLease", {"ran": True, "released": True}, runId=R, owner="worker-A", ttlSeconds=60, work={"beats": [30000], "returns": "done"})],
   {"receipts": [rec("acquired", "worker-A"), rec("renewed", "worker-A", iso("00:01:30.000")), rec("released", "worker-A")], "metrics": {"releases": 1, "releaseFailures": 0, "renews": 1}, "runs": [{"id": R, "status": "completed"}]}, fix="fix-7")
sc("lease-lost-signal-on-expiry", "DESIGN fix 7 (lease-lost signal)", "The work overran its lease (no beat in time): the next beat's renew misses, the loss is reported with cause `expired`, and no doomed release is sent.",
   [op("executeWithLease", {"ran": True, "lost": "expired", "released": False}, runId=R, owner="worker-A", ttlSeconds=10, renewEveryMs=5000, work={"beats": [11000], "returns": "late"})],
   {"metrics": {"renewFailures": 1, "releases": 0, "releaseFailures": 0}, "runs": [{"id": R, "status": "leased", "lease_owner": "worker-A"}]}, fix="fix-7")
# ---------------- deliberate fixes ----------------
sc("fix-1-one-expiry-rule", "semantics §2.6 boundary asymmetry (fixed); golden lifecycle exact-expiry-boundary", "At now == expiry the lease is expired everywhere: verify refuses it and the sweep reclaims it (the reference's sweep did not).",
   [acq("worker-A", save="fA"), adv(60000), op("verifyFence", False, fence="$fA"), reclaim({"reclaimedCount": 1, "reclaimedIds": [R]}), acq("worker-B", expect={"acquired": True, "run": {"retries": 1}})],
   {"metrics": {"fenceRejections": 1, "reclaims": 1}}, fix="fix-1")
sc("fix-1-null-expiry-counts-as-expired", "DESIGN fix 1", "A held row with no expiry is expired: the sweep reclaims it.",
   [reclaim({"reclaimedIds": [R]})], {"runs": [{"id": R, "status": "ready", "retries": 1}]}, runs=[run(status="running", lease_owner="w9", lease_expires_at=None)], fix="fix-1")
sc("fix-2-no-zombie-writes", "semantics §2.3/§2.4 SURPRISE (fixed); golden lifecycle zombie-window-asymmetry", "An expired token is refused by renew and release exactly as by verify; verify writes nothing when it rejects.",
   [acq("worker-A", save="fA"), adv(61000), op("verifyFence", False, fence="$fA"), op("renew", None, fence="$fA", ttlSeconds=60), op("release", None, fence="$fA", nextStatus="completed")],
   {"runs": [{"id": R, "status": "leased", "lease_owner": "worker-A", "updated_at": T0}], "metrics": metrics(acquireAttempts=1, acquireWins=1, fenceRejections=1, renewFailures=1, releaseFailures=1),
    "receipts": [rec("acquired","worker-A"), rec("fence_rejected","worker-A",iso("00:01:00.000")), rec("fence_rejected","worker-A",iso("00:01:00.000")), rec("fence_rejected","worker-A",iso("00:01:00.000"))]}, fix="fix-2")
sc("fix-3-takeover-counts-recovery", "semantics §2.2 step 6 (fixed)", "A takeover of an expired lease bumps retries, emits reclaimed (naming the previous owner) before acquired, and counts reclaims.",
   [acq("worker-A"), adv(61000), acq("worker-B", expect={"acquired": True, "run": {"retries": 1, "fencing_epoch": 2}})],
   {"receipts": [rec("acquired","worker-A"), rec("reclaimed","worker-A",None,at=iso("00:01:01.000")), rec("acquired","worker-B",iso("00:02:01.000"))], "metrics": metrics(acquireAttempts=2, acquireWins=2, reclaims=1)}, fix="fix-3")
steps = [acq("worker-0"), adv(61000), acq("worker-1"), adv(61000), acq("worker-2", expect={"acquired": False, "code": "quarantined", "run": {"status": "quarantined", "retries": 2}})]
sc("fix-3-takeover-at-ceiling-quarantines", "DESIGN fix 3", "maxRetries 1: the second takeover is at the ceiling, so the same write quarantines the run and acquire answers quarantined.",
   steps + [acq("worker-3", expect={"acquired": False, "code": "quarantined"})],
   {"receipts": [rec("acquired","worker-0"), rec("reclaimed","worker-0"), rec("acquired","worker-1"), rec("quarantined","worker-1")], "metrics": {"reclaims": 1, "quarantines": 1, "acquireWins": 2}, "runs": [{"id": R, "status": "quarantined", "lease_owner": None}]},
   config={"maxRetries": 1}, fix="fix-3")
sc("fix-4-effect-receipts", "semantics §1.6 (fixed)", "guardIrreversible emits effect_committed only after the effect succeeded; a failing effect emits none, bumps nothing, and stays recorded (at most once).",
   [acq("worker-A", save="fA"), op("guardIrreversible", {"error": "effect-failed"}, fence="$fA", effectKey="k1", ledger="memory", effect={"throws": "boom"}),
    op("guardIrreversible", {"committed": False, "reason": "already-committed"}, fence="$fA", effectKey="k1", ledger="memory", effect={"returns": 1}), {"op": "expectFired", "args": {"k1": 1}}],
   {"metrics": {"effectCommits": 0, "effectDedupes": 1}, "receipts": [rec("acquired","worker-A"), rec("fence_verified","worker-A"), rec("fence_verified","worker-A"), rec("effect_deduped","worker-A",iso("00:01:00.000"),"k1")]}, fix="fix-4")
sc("fix-6-honest-reconciler", "semantics §2.14 #13 (fixed)", "The reconciler's counts and log entries are exactly the transitions that happened: one commit, one reopen, one left.",
   [op("reconcileOutbox", {"scanned": 3, "committed": 1, "reopened": 1, "left": 1, "abandoned": 0, "errors": []}, probes={"farcaster": {"sent": {"h": 1}}, "mail": "not-sent"})],
   {"dispatchLog": [{"outcome": "sent"}, {"outcome": "reconciled"}], "intents": [{"effect_key": "farcaster:1", "state": "committed"}, {"effect_key": "mail:1", "state": "intent"}, {"effect_key": "telegram:1", "state": "dispatched", "attempts": 1}]},
   intents=[di("farcaster:1", "farcaster"), di("mail:1", "mail"), di("telegram:1", "telegram")], clock=RT, fix="fix-6")
sc("fix-8-resource-run-find-or-create", "semantics §7 wedge and resource-id bugs (fixed); DESIGN fix 8", "ensureResourceRun finds or creates by deterministic key; a success releases the resource back to ready with retries 0, so it never wedges.",
   [op("ensureResourceRun", {"created": True, "run": {"idempotency_key": "heart:resource:cbb4db044d35e6084fa72929536cc02e4370e14ef1822d022b391b4ae097757e", "status": "ready", "visibility": "team"}}, save="res", kind="zoe.work-loop", key="singleton", objective="work loop", createdBy="zoe:work-loop"),
    op("ensureResourceRun", {"created": False, "run": {"id": "$res"}}, kind="zoe.work-loop", key="singleton", objective="work loop", createdBy="zoe:work-loop"),
    op("executeWithLease", {"ran": True, "released": True}, runId="$res", owner="w1", ttlSeconds=600, releaseToReady=True, work={"returns": 1}),
    op("executeWithLease", {"ran": True, "released": True}, runId="$res", owner="w2", ttlSeconds=600, releaseToReady=True, work={"returns": 2}),
    op("ensureResourceRun", {"run": {"status": "ready", "retries": 0, "lease_owner": None}}, kind="zoe.work-loop", key="singleton", objective="work loop", createdBy="zoe:work-loop"),
    op("ensureResourceRun", {"error": "invalid-input"}, kind="", key="singleton", objective="x", createdBy="y")], {"metrics": {"acquireWins": 2, "releases": 2}}, runs=[], fix="fix-8")
sc("fix-8-release-to-ready-only-for-resources", "DESIGN fix 8", "Releasing an ordinary run to ready is invalid input and changes nothing.",
   [acq("worker-A", save="fA"), op("release", {"error": "invalid-input"}, fence="$fA", nextStatus="ready"), op("verifyFence", True, fence="$fA")],
   {"runs": [{"id": R, "status": "leased", "lease_owner": "worker-A"}], "metrics": {"releaseFailures": 0}}, fix="fix-8")
sc("fix-9-canary-run-on-real-schema", "semantics §6 canary bug (fixed); DESIGN fix 9", "The canary row is created with a UUID assignment_id and visibility team, by its deterministic key.",
   [op("ensureResourceRun", {"created": True, "run": {"idempotency_key": "heart:resource:feafc855c8ea80bff32ad3d81a37a199ae66bc65d256288bd91683ffd8438bed", "visibility": "team", "status": "ready"}}, kind="zoe.heart.canary", key="singleton", objective="Heart fleet canary", createdBy="zoe:heart-canary")],
   {}, runs=[], fix="fix-9")
sc("fix-10-input-validated-at-the-boundary", "DESIGN fix 10", "Bad ttl, empty ids and unknown statuses are invalid-input before any store call; nothing changes.",
   [acq("worker-A", save="fA"), op("renew", {"error": "invalid-input"}, fence="$fA", ttlSeconds=0), op("renew", {"error": "invalid-input"}, fence="$fA", ttlSeconds=31536001),
    op("release", {"error": "invalid-input"}, fence="$fA", nextStatus="done"), op("verifyFence", {"error": "invalid-input"}, fence={"runId": "", "owner": "worker-A", "leaseExpiresAt": iso("00:01:00.000")}),
    op("guardIrreversible", {"error": "invalid-input"}, fence="$fA", effectKey="", ledger="memory", effect={"returns": 1}),
    op("sendOnce", {"error": "invalid-input"}, fence="$fA", channel="pigeon", effectKey="k", payload={}, send={"returns": {}}), op("requeue", {"error": "invalid-input"}, runId="", operator="op")],
   {"metrics": metrics(acquireAttempts=1, acquireWins=1), "runs": [{"id": R, "status": "leased", "updated_at": T0}], "intents": []}, fix="fix-10")

# ---------------- beyond the reference ----------------
sc("epoch-raised-by-every-acquire", "DESIGN beyond: fencing epoch", "Each acquire raises the epoch; a token carries it; an old token whose epoch is stale is refused even if owner and expiry match; a token without epoch (old node) is checked by the three fields.",
   [acq("worker-A", save="fA", expect={"fence": {"epoch": 1}}), op("release", {"status": "completed"}, fence="$fA", nextStatus="completed")],
   {"runs": [{"id": R, "fencing_epoch": 1}]})
sc("epoch-old-token-without-epoch", "DESIGN compatibility: tokens minted by an old node", "A three-field token (no epoch) is verified by owner + expiry equality.",
   [op("verifyFence", True, fence={"runId": R, "owner": "old-node", "leaseExpiresAt": "2026-07-30T00:05:00.000Z"}),
    op("verifyFence", False, fence={"runId": R, "owner": "old-node", "leaseExpiresAt": "2026-07-30T00:05:00.000Z", "epoch": 3})],
   {}, runs=[run(status="leased", lease_owner="old-node", lease_expires_at="2026-07-30T00:05:00.000Z", fencing_epoch=7)])
sc("store-failure-is-an-error", "DESIGN Errors", "A store failure surfaces as store-unavailable (never a collision or not-found) and changes nothing; the next call works.",
   [{"op": "failNext", "args": {"request": "update_run", "times": 1}}, acq("worker-A", expect={"error": "store-unavailable"}),
    {"op": "failNext", "args": {"request": "read_run", "times": 1}}, acq("worker-B", rid="missing", expect={"error": "store-unavailable"}),
    {"op": "failNext", "args": {"request": "scan_runs", "times": 1}}, reclaim({"error": "store-unavailable"}),
    acq("worker-A", expect=WON)],
   {"runs": [{"id": R, "status": "leased", "lease_owner": "worker-A"}], "receipts": [rec("acquired", "worker-A")], "metrics": {"acquireCollisions": 0, "acquireWins": 1}})
sc("send-once-store-failure-after-send", "DESIGN: multi-write operations", "If the commit write fails after the send, the error names the step; the intent stays dispatched and the reconciler commits it with the probe's evidence; the effect fired once.",
   [acq("worker-A", save="fA"), {"op": "failNext", "args": {"request": "update_intent", "after": 1, "times": 1}},
    op("sendOnce", {"error": "store-unavailable"}, fence="$fA", channel="telegram", effectKey="telegram:once", payload={"a": 1}, send={"returns": {"message_id": 5}}),
    {"op": "expectFired", "args": {"telegram:once": 1}}, adv(61000),
    op("reconcileOutbox", {"scanned": 1, "committed": 1}, probes={"telegram": {"sent": {"message_id": 5}}}),
    op("sendOnce", {"sent": False, "reason": "fence-rejected"}, fence="$fA", channel="telegram", effectKey="telegram:once", payload={"a": 1}, send={"returns": {"message_id": 6}}),
    {"op": "expectFired", "args": {"telegram:once": 1}}],
   {"intents": [{"state": "committed", "external_ref": {"message_id": 5}}], "metrics": {"effectCommits": 1}})
sc("operator-requeue-and-force-release", "DESIGN beyond: operators can act", "Requeue a quarantined run (receipt requeued, retries 0); force-release a live lease (receipt force_released naming the holder), after which its token is dead.",
   [op("listRuns", [{"id": R2}], status="quarantined"), op("requeue", {"status": "ready", "retries": 0}, runId=R2, operator="ops:alice"), op("requeue", {"error": "invalid-state"}, runId=R2, operator="ops:alice"), op("requeue", {"error": "run-not-found"}, runId="nope", operator="ops:alice"),
    acq("worker-A", save="fA"), op("forceRelease", {"status": "ready", "lease_owner": None}, runId=R), op("verifyFence", False, fence="$fA"), op("forceRelease", {"error": "invalid-state"}, runId=R),
    op("listRuns", [{"status": "ready"}, {"status": "ready"}], status="ready", limit=5), op("listRuns", [], status="quarantined")],
   {"receipts": [rec("requeued", "ops:alice", rid=R2), rec("acquired", "worker-A"), rec("force_released", "worker-A"), rec("fence_rejected", "worker-A", iso("00:01:00.000"))]},
   runs=[run(), run(R2, status="quarantined", retries=6)])

# ---------------- the receipt chain (verifyReceipts) ----------------
# Logs built here from first principles (the reference digest, the chain's link, its HMAC and
# its Ed25519 signature), so the scenarios pin the format rather than echo the implementation.
import hashlib, hmac

# Ed25519 (RFC 8032, section 6's reference code; the standard library has none). Slow, small,
# and checked against the RFC's first test vector below.
ED_P = 2**255 - 19
ED_L = 2**252 + 27742317777372353535851937790883648493
ED_D = -121665 * pow(121666, ED_P - 2, ED_P) % ED_P
ED_SQRT_M1 = pow(2, (ED_P - 1) // 4, ED_P)
def ed_add(P, Q):
    A, B = (P[1] - P[0]) * (Q[1] - Q[0]) % ED_P, (P[1] + P[0]) * (Q[1] + Q[0]) % ED_P
    C, D = 2 * P[3] * Q[3] * ED_D % ED_P, 2 * P[2] * Q[2] % ED_P
    E, F, G_, H = B - A, D - C, D + C, B + A
    return (E * F % ED_P, G_ * H % ED_P, F * G_ % ED_P, E * H % ED_P)
def ed_mul(s, P):
    Q = (0, 1, 1, 0)
    while s > 0:
        if s & 1: Q = ed_add(Q, P)
        P = ed_add(P, P); s >>= 1
    return Q
def ed_recover_x(y, sign):
    x2 = (y * y - 1) * pow(ED_D * y * y + 1, ED_P - 2, ED_P)
    x = pow(x2, (ED_P + 3) // 8, ED_P)
    if (x * x - x2) % ED_P != 0: x = x * ED_SQRT_M1 % ED_P
    assert (x * x - x2) % ED_P == 0
    return ED_P - x if (x & 1) != sign else x
ED_GY = 4 * pow(5, ED_P - 2, ED_P) % ED_P
ED_GX = ed_recover_x(ED_GY, 0)
ED_G = (ED_GX, ED_GY, 1, ED_GX * ED_GY % ED_P)
def ed_compress(P):
    zinv = pow(P[2], ED_P - 2, ED_P)
    x, y = P[0] * zinv % ED_P, P[1] * zinv % ED_P
    return int.to_bytes(y | ((x & 1) << 255), 32, "little")
def ed_expand(seed):
    h = hashlib.sha512(seed).digest()
    a = int.from_bytes(h[:32], "little") & ((1 << 254) - 8) | (1 << 254)
    return a, h[32:]
def ed_public(seed): return ed_compress(ed_mul(ed_expand(seed)[0], ED_G))
def ed_sign(seed, msg):
    a, prefix = ed_expand(seed)
    A = ed_compress(ed_mul(a, ED_G))
    r = int.from_bytes(hashlib.sha512(prefix + msg).digest(), "little") % ED_L
    R_ = ed_compress(ed_mul(r, ED_G))
    h = int.from_bytes(hashlib.sha512(R_ + A + msg).digest(), "little") % ED_L
    return R_ + int.to_bytes((r + h * a) % ED_L, 32, "little")
_rfc = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
assert ed_public(_rfc).hex() == "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
assert ed_sign(_rfc, b"").hex() == ("e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb882"
                                    "1590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b")
def canon(obj): return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
def receipt(ev, owner, at, exp=None, rid=R, key=None):
    body = {"event": ev, "runId": rid, "owner": owner, "leaseExpiresAt": exp, "effectKey": key}
    return {"schemaVersion": "zao.heart.receipt.v1", **body, "at": at,
            "digest": "sha256:dreamnet-sorted-json:v0:" + hashlib.sha256(canon(body).encode()).hexdigest()}
assert receipt("acquired", "worker-A", T0, iso("00:01:00.000")) == G["receipt_digests"][0]["receipt"]
KEY = bytes(range(32)); OTHER_KEY = bytes(range(32, 64))
def key_text(k): return "heart-fleet-hmac-sha256-key:" + k.hex()
def link(r, seq, prev):
    return "sha256:heart-chain:v1:" + hashlib.sha256(canon({"at": r["at"], "digest": r["digest"], "prev": prev, "runId": r["runId"], "seq": seq}).encode()).hexdigest()
def chained(receipts, key=None, ed_seed=None):
    heads, out = {}, []
    for r in receipts:
        seq, prev = heads.get(r["runId"], (0, None)); seq += 1
        c = dict(r, seq=seq, prev=prev, link=link(r, seq, prev))
        if key: c["hmac"] = "hmac-sha256:" + hmac.new(key, c["link"].encode(), hashlib.sha256).hexdigest()
        if ed_seed: c["sig"] = "ed25519:" + ed_sign(ed_seed, c["link"].encode()).hex()
        heads[r["runId"]] = (seq, c["link"]); out.append(c)
    return out
def at(s): return iso("00:00:%06.3f" % s)
plain = [receipt("acquired", "worker-A", at(0), iso("00:01:00.000")), receipt("renewed", "worker-A", at(1), iso("00:01:01.000")),
         receipt("acquired", "worker-B", at(2), iso("00:01:02.000"), rid=R2), receipt("fence_verified", "worker-A", at(3), iso("00:01:01.000")),
         receipt("released", "worker-B", at(4), rid=R2), receipt("released", "worker-A", at(5))]
LOG = chained(plain, KEY)
def forged(c, owner):
    """c with another owner, digest and link recomputed for its place: what a forger without the key can write."""
    f = dict(receipt(c["event"], owner, c["at"], c["leaseExpiresAt"], rid=c["runId"]), seq=c["seq"], prev=c["prev"])
    f["link"] = link(f, f["seq"], f["prev"]); return f
def vr(expect, log, **options): return op("verifyReceipts", expect, log=log, options=options)
def finding(pos, code, rid=R): return {"position": pos, "code": code, "runId": rid}
RUNS = {R: {"receipts": 4, "chained": 4, "unchained": 0, "lastSeq": 4}, R2: {"receipts": 2, "chained": 2, "unchained": 0, "lastSeq": 2}}
K = key_text(KEY)
unchained = dict(plain[0])
stripped = [dict(c) for c in LOG]; del stripped[2]["hmac"]
lines = "".join(json.dumps(c) + "\n" for c in LOG)
sc("receipt-chain-verify", "issue: receipts that prove completeness and origin", "A chained, HMAC-signed log of two runs verifies, with and without the key; every kind of tampering is named at its line (a gap, a reorder, a duplicate, a fork, a broken link, a cut-off tail given the final seq, an edited field, a missing or foreign signature); unchained receipts are counted, or fail when chains are required; what is not a log is invalid-input.",
   [vr({"receipts": 6, "ok": 6, "tampered": 0, "malformed": 0, "chained": 6, "unchained": 0, "signed": 0, "runs": RUNS, "findings": []}, LOG),
    vr({"ok": 6, "signed": 6, "findings": []}, LOG, key=K),
    vr({"ok": 0, "signed": 0, "findings": [finding(i + 1, "signature-invalid", c["runId"]) for i, c in enumerate(LOG)]}, LOG, key=key_text(OTHER_KEY)),
    vr({"receipts": 5, "ok": 5, "findings": [finding(3, "chain-gap")]}, LOG[:1] + LOG[2:]),
    vr({"ok": 6, "findings": [finding(4, "chain-reorder")]}, [LOG[0], LOG[3], LOG[2], LOG[1], LOG[4], LOG[5]]),
    vr({"receipts": 7, "ok": 7, "findings": [finding(7, "chain-duplicate")]}, LOG + [LOG[1]]),
    vr({"receipts": 7, "ok": 7, "findings": [finding(7, "chain-fork")]}, LOG + [forged(LOG[1], "worker-B")]),
    vr({"ok": 6, "findings": [finding(4, "chain-broken")]}, LOG[:1] + [forged(LOG[1], "mallory")] + LOG[2:]),
    vr({"ok": 5, "findings": [finding(2, "signature-missing"), finding(4, "chain-broken")]}, LOG[:1] + [forged(LOG[1], "mallory")] + LOG[2:], key=K),
    vr({"ok": 5, "findings": []}, LOG[:5]),
    vr({"ok": 5, "findings": [{"position": None, "code": "chain-truncated", "runId": R}]}, LOG[:5], finalSeq={R: 4}),
    vr({"ok": 5, "tampered": 1, "findings": [finding(2, "receipt-tampered"), finding(4, "chain-gap")]}, LOG[:1] + [dict(LOG[1], owner="mallory")] + LOG[2:]),
    vr({"ok": 5, "signed": 5, "findings": [finding(3, "signature-missing", R2)]}, stripped, key=K),
    vr({"receipts": 7, "ok": 7, "chained": 6, "unchained": 1, "findings": []}, LOG + [unchained]),
    vr({"receipts": 7, "ok": 6, "unchained": 1, "findings": [finding(7, "receipt-unchained")]}, LOG + [unchained], requireChain=True),
    vr({"receipts": 7, "ok": 6, "malformed": 1, "findings": [{"position": 7, "code": "invalid-input", "runId": None}]}, LOG + [{"not": "a receipt"}]),
    vr({"receipts": 7, "ok": 6, "malformed": 1, "findings": [{"position": 7, "code": "invalid-input", "runId": None}]}, lines + '{"schemaVer'),
    vr({"receipts": 2, "ok": 2, "runs": {R2: RUNS[R2]}, "findings": []}, [LOG[2], LOG[4]], run=R2),
    vr({"error": "invalid-input"}, lines[:len(lines) // 2] + "\nnot json\n" + lines),
    vr({"error": "invalid-input"}, LOG, run=R2),
    vr({"error": "invalid-input"}, LOG[:1] + [dict(LOG[1], schemaVersion="zao.heart.receipt.v9")]),
    vr({"error": "invalid-input"}, LOG, keys=K),
    vr({"error": "invalid-input"}, LOG, key="heart-fleet-hmac-sha256-key:00"),
    vr({"error": "invalid-input"}, LOG, finalSeq={R: 0})],
   runs=[])

ED_SEED, OTHER_ED_SEED = bytes(range(64, 96)), bytes(range(96, 128))
def public_text(seed): return "heart-fleet-ed25519-public-key:" + ed_public(seed).hex()
PUB = public_text(ED_SEED)
ED_LOG = chained(plain, ed_seed=ED_SEED)
BOTH = chained(plain, KEY, ED_SEED)
ed_stripped = [dict(c) for c in ED_LOG]; del ed_stripped[4]["sig"]
sc("receipt-chain-ed25519", "issue: receipts that prove completeness and origin", "An Ed25519-signed chain (RFC 8032 signatures of each link, made here from first principles) verifies with the fleet's public key and counts every receipt signed; another fleet's public key finds every signature invalid; a receipt whose signature was removed, or a forgery chained without the secret key, is named at its line; a log signed with both HMAC and Ed25519 verifies with either key or both; a public key that is not one (wrong length, an HMAC key, not hex) is invalid-input.",
   [vr({"receipts": 6, "ok": 6, "chained": 6, "signed": 0, "findings": []}, ED_LOG),
    vr({"ok": 6, "signed": 6, "findings": []}, ED_LOG, publicKey=PUB),
    vr({"ok": 0, "signed": 0, "findings": [finding(i + 1, "signature-invalid", c["runId"]) for i, c in enumerate(ED_LOG)]}, ED_LOG, publicKey=public_text(OTHER_ED_SEED)),
    vr({"ok": 5, "signed": 5, "findings": [finding(5, "signature-missing", R2)]}, ed_stripped, publicKey=PUB),
    vr({"ok": 5, "findings": [finding(2, "signature-missing"), finding(4, "chain-broken")]}, ED_LOG[:1] + [forged(ED_LOG[1], "mallory")] + ED_LOG[2:], publicKey=PUB),
    vr({"ok": 5, "signed": 5, "findings": [finding(2, "signature-invalid")]}, ED_LOG[:1] + [dict(ED_LOG[1], sig=ED_LOG[3]["sig"])] + ED_LOG[2:], publicKey=PUB),
    vr({"ok": 6, "signed": 6, "findings": []}, BOTH, publicKey=PUB),
    vr({"ok": 6, "signed": 6, "findings": []}, BOTH, key=K),
    vr({"ok": 6, "signed": 6, "findings": []}, BOTH, key=K, publicKey=PUB),
    vr({"ok": 0, "signed": 0, "findings": [finding(i + 1, "signature-invalid", c["runId"]) for i, c in enumerate(BOTH)]}, BOTH, key=K, publicKey=public_text(OTHER_ED_SEED)),
    vr({"error": "invalid-input"}, ED_LOG, publicKey="heart-fleet-ed25519-public-key:" + ed_public(ED_SEED).hex()[:62]),
    vr({"error": "invalid-input"}, ED_LOG, publicKey=K),
    vr({"error": "invalid-input"}, ED_LOG, publicKey="heart-fleet-ed25519-public-key:not-hex")],
   runs=[])

os.makedirs(OUT, exist_ok=True)
for f in os.listdir(OUT):
    if f.endswith('.json'): os.remove(os.path.join(OUT, f))
names = set()
for d in out:
    assert d["name"] not in names, d["name"]; names.add(d["name"])
    with open(os.path.join(OUT, d["name"] + ".json"), "w", newline="\n") as fh:
        json.dump(d, fh, indent=1, ensure_ascii=False); fh.write("\n")
print(len(out), "scenarios")
