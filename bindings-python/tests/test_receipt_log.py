"""``verify_receipts``: a receipt log checked by the core gives, for every kind of tampering
and every option, the report ``heart-fleet verify-receipts --json`` prints for the same file
and key files, and the same errors. The log is written by the CLI (chained and signed).

The CLI is ``$HEART_FLEET_CLI`` (the CI script builds it)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

import heart_fleet as hf
from conftest import cli


def run(dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([cli(), *args], cwd=dir, capture_output=True, text=True, check=False)


@pytest.fixture
def signed(tmp_path: Path) -> tuple[Path, str]:
    for kind, out in (("hmac", "fleet.key"), ("ed25519", "fleet-ed.key"), ("hmac", "other.key")):
        assert run(tmp_path, "keygen", "--kind", kind, "--out", out).returncode == 0
    sim = run(tmp_path, "simulate", "--seed", "5", "--crash-rate", "0.3", "--quiet", "--receipts", "r.jsonl",
              "--signing-key", "fleet.key", "--signing-key", "fleet-ed.key")
    assert sim.returncode == 0, sim.stderr
    return tmp_path, (tmp_path / "r.jsonl").read_text()


def test_verify_receipts_gives_the_clis_report_for_every_tampering_and_option(signed: tuple[Path, str]) -> None:
    dir, log = signed
    key = lambda f: (dir / f).read_text()  # noqa: E731
    lines = [line for line in log.split("\n") if line]
    receipts = [json.loads(line) for line in lines]
    run_id = receipts[0]["runId"]
    of_run = [i for i, r in enumerate(receipts) if r["runId"] == run_id]
    assert len(of_run) >= 3
    without = lambda i: [line for j, line in enumerate(lines) if j != i]  # noqa: E731
    swapped = list(lines)
    swapped[of_run[1]], swapped[of_run[2]] = swapped[of_run[2]], swapped[of_run[1]]
    edited = list(lines)
    edited[of_run[1]] = json.dumps({**receipts[of_run[1]], "owner": "mallory"})
    unchained = {k: v for k, v in receipts[0].items() if k not in ("seq", "prev", "link", "hmac", "sig")}
    last = of_run[-1]
    cases: list[tuple[str, list[str], list[str], dict[str, Any]]] = [
        ("intact", lines, [], {}),
        ("intact, both keys", lines, ["--key", "fleet.key", "--public-key", "fleet-ed.key.pub"],
         {"key": key("fleet.key"), "public_key": key("fleet-ed.key.pub")}),
        ("another fleet's key", lines, ["--key", "other.key"], {"key": key("other.key")}),
        ("a deleted receipt", without(of_run[1]), [], {}),
        ("two receipts swapped", swapped, [], {}),
        ("a receipt copied in again", [*lines, lines[of_run[1]]], [], {}),
        ("an edited owner", edited, ["--key", "fleet.key"], {"key": key("fleet.key")}),
        ("a cut-off tail", without(last), ["--final-seq", f"{run_id}={receipts[last]['seq']}"],
         {"final_seq": {run_id: receipts[last]["seq"]}}),
        ("the log of one run", [line for line in lines if json.loads(line)["runId"] == run_id], ["--run", run_id],
         {"run": run_id}),
        ("an unchained receipt, chains required", [*lines, json.dumps(unchained)], ["--require-chain"],
         {"require_chain": True}),
    ]
    for name, body, args, options in cases:
        text = "\n".join(body) + "\n"
        (dir / "t.jsonl").write_text(text)
        out = run(dir, "verify-receipts", "t.jsonl", "--json", *args)
        assert out.returncode in (0, 1), f"{name}: {out.stderr}"
        expected = json.loads(out.stdout)
        report = hf.verify_receipts(text, **options)
        assert report.to_dict() == expected, name
        assert report.passed == (out.returncode == 0), name
        assert hf.verify_receipts(text.encode(), **options) == report, f"{name} (bytes)"
        assert hf.verify_receipts([json.loads(line) for line in body], **options) == report, f"{name} (receipts)"
    first = hf.verify_receipts(log)
    assert isinstance(first, hf.LogReport) and isinstance(first.runs[run_id], hf.RunChain)
    assert first.runs[run_id].last_seq == len(of_run)


def test_bad_logs_and_options_are_invalid_input_with_the_clis_message(signed: tuple[Path, str]) -> None:
    dir, log = signed
    lines = [line for line in log.split("\n") if line]
    for name, text, args, options in [
        ("not JSON Lines", f"{lines[0]}\nnot json\n{lines[1]}\n", [], {}),
        ("another run than the log's", log, ["--run", "no-such-run"], {"run": "no-such-run"}),
        ("an unknown schema version", log.replace("zao.heart.receipt.v1", "zao.heart.receipt.v9", 1), [], {}),
    ]:
        (dir / "t.jsonl").write_text(text)
        out = run(dir, "verify-receipts", "t.jsonl", "--json", *args)
        assert out.returncode == 2, name
        with pytest.raises(hf.InvalidInputError) as e:
            hf.verify_receipts(text, **options)
        assert out.stderr == f"heart-fleet: verify-receipts t.jsonl: invalid-input: {e.value}\n", name
    secret = (dir / "fleet.key").read_text().strip().split(":")[1]
    for options, says in [
        ({"key": (dir / "fleet-ed.key.pub").read_text()}, "key: an HMAC key is needed"),
        ({"public_key": (dir / "fleet.key").read_text()}, "publicKey: an Ed25519 public key is needed"),
        ({"final_seq": {"r": 0}}, "a seq counts from 1"),
        ({"key": ""}, "key: the key is empty"),
    ]:
        with pytest.raises(hf.InvalidInputError) as e:
            hf.verify_receipts(log, **options)
        assert says in str(e.value) and secret not in str(e.value)
    for bad_log, bad_options in [(5, {}), (log, {"key": 5}), (log, {"require_chain": "yes"}), (log, {"final_seq": [1]})]:
        with pytest.raises(hf.InvalidTypeError):
            hf.verify_receipts(bad_log, **bad_options)  # type: ignore[arg-type]
