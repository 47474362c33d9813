#!/usr/bin/env bash
# The Python binding's whole test suite, as CI runs it (scripts/test-all.sh calls it after
# PostgreSQL was started; it also runs on its own):
#
#   bash scripts/test-python.sh
#
# 1. builds the abi3 wheel with maturin (release) into bindings-python/dist as manylinux2014
#    (glibc 2.17: Debian 11, Ubuntu 20.04, Amazon Linux 2) through maturin's zig linker
#    (`ziglang` from PyPI, no container) and checks the tag with `auditwheel show`;
# 2. installs it, with pytest, pytest-asyncio, psycopg[binary] and mypy, into a FRESH
#    virtual environment; alone into another whose PATH has no cargo or rustc, where it runs a
#    lease cycle on SQLite; and checks that `pip install ./bindings-python` works in a third;
# 3. runs pytest from outside the source tree, so the installed wheel is what is tested
#    (conformance: every scenario in 6 store modes; asyncio; execute_with_lease; bad input;
#    SQLite, also sharing a file with the Rust CLI; PostgreSQL; the host example), then
#    `mypy --strict` on a typed usage file against the installed package, and on the
#    package's source.
#
# Needs python3 >= 3.11 and cargo. Installs maturin, ziglang and auditwheel into a cached tools venv
# (bindings-python/.venv-build), and PostgreSQL (scripts/postgres.sh) when DATABASE_URL is
# unset. The SQLite shared-file test uses the `heart-fleet` CLI: $HEART_FLEET_CLI, else the
# release binary of the workspace (built here if missing).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
start=$(date +%s)
step() { printf '\n== python: %s\n' "$*"; }

py=${PYTHON:-python3}
"$py" -c 'import sys; assert sys.version_info >= (3, 11), sys.version' || {
  echo "test-python: python3 >= 3.11 is required" >&2
  exit 2
}

step "maturin, ziglang and auditwheel (tools venv)"
tools="$root/bindings-python/.venv-build"
tool_pins=("maturin>=1.16,<1.17" "ziglang==0.13.0.post1" "auditwheel==6.8.2")
if ! "$tools/bin/maturin" --version 2>/dev/null | grep -q '^maturin 1\.16\.' ||
  ! "$tools/bin/python" -m ziglang version 2>/dev/null | grep -qx '0\.13\.0' ||
  ! "$tools/bin/auditwheel" --version 2>/dev/null | grep -q '^auditwheel 6\.8\.2 '; then
  rm -rf "$tools"
  "$py" -m venv "$tools"
  "$tools/bin/pip" install -q --disable-pip-version-check "${tool_pins[@]}"
fi
"$tools/bin/maturin" --version
echo "zig $("$tools/bin/python" -m ziglang version)"

step "the manylinux2014 wheel (maturin build --release --zig)"
rm -rf bindings-python/dist
# maturin finds zig as `python -m ziglang` of the Python on PATH: the tools venv's.
(cd bindings-python && PATH="$tools/bin:$PATH" "$tools/bin/maturin" build --release --zig --compatibility manylinux2014 -o dist 2>&1 | tail -n 3)
wheel=$(ls bindings-python/dist/heart_fleet-*.whl)
echo "$wheel"
case "$wheel" in
  *-cp311-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl) ;;
  *) echo "test-python: the wheel is not tagged cp311-abi3 manylinux2014 / manylinux_2_17: $wheel" >&2; exit 1 ;;
esac
# auditwheel reads the symbols the extension really needs: glibc 2.17 at most.
shown=$("$tools/bin/auditwheel" show "$wheel")
echo "$shown" | tr '\n' ' ' | grep -q 'is consistent with the following platform tag: "manylinux_2_17_x86_64"' || {
  echo "$shown" >&2
  echo "test-python: auditwheel does not confirm manylinux_2_17_x86_64" >&2
  exit 1
}
echo "auditwheel: consistent with manylinux_2_17_x86_64"

step "a fresh virtual environment with the wheel"
venv=$(mktemp -d /tmp/heart-fleet-py.XXXXXX)
trap 'rm -rf "$venv"' EXIT
"$py" -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "$wheel" pytest pytest-asyncio "psycopg[binary]" mypy
"$venv/bin/python" -c 'import heart_fleet, sys; print("heart_fleet", heart_fleet.__version__, "from", heart_fleet.__file__)'

step "the wheel in a fresh venv with no Rust on PATH: a lease cycle on SQLite"
norust="$venv/norust"
mkdir "$norust"
"$py" -m venv "$norust/venv"
"$norust/venv/bin/pip" install -q --disable-pip-version-check "$wheel"
(
  cd "$norust"
  export PATH="$norust/venv/bin:/usr/bin:/bin"
  if command -v cargo >/dev/null || command -v rustc >/dev/null; then
    echo "test-python: cargo or rustc is still on PATH ($PATH)" >&2
    exit 1
  fi
  python - <<'PY'
import heart_fleet as hf

heart = hf.HeartFleet(hf.SqliteLeaseStore("cycle.db"))
run = heart.ensure_resource_run("wheel-check", "no-rust").run
result = hf.execute_with_lease(heart, run.id, "worker-A", 60, lambda lease: lease.fence.epoch, release_to_ready=True)
assert result.ran and result.released and result.result == 1, result
assert [r.event for r in heart.receipts()] == ["acquired", "released"], heart.receipts()
assert all(hf.verify_receipt(r) for r in heart.receipts())
print("no cargo or rustc on PATH: the wheel ran a lease cycle on SQLite")
PY
)

step "pip install ./bindings-python (the PEP 517 path) into another fresh environment"
"$py" -m venv "$venv/pep517"
"$venv/pep517/bin/pip" install -q --disable-pip-version-check ./bindings-python
(cd "$venv" && "$venv/pep517/bin/python" -c 'import heart_fleet as hf; assert hf.canonicalize({"b": 1, "a": 2}) == "{\"a\":2,\"b\":1}"; print("pip install ./bindings-python: ok")')

step "postgresql"
if [ -z "${DATABASE_URL:-}" ]; then
  # shellcheck source=scripts/postgres.sh
  source scripts/postgres.sh
  ensure_postgres
fi
if [ -z "${HEART_PGBOUNCER_URL:-}" ]; then
  # The PostgreSQL tests run through a transaction pooler too.
  # shellcheck source=scripts/postgres.sh
  source scripts/postgres.sh
  ensure_pgbouncer
fi
export DATABASE_URL HEART_PGBOUNCER_URL
echo "DATABASE_URL=$DATABASE_URL"

step "the heart-fleet CLI (for the shared SQLite file test)"
if [ -z "${HEART_FLEET_CLI:-}" ]; then
  cargo build --release -q --bin heart-fleet
  HEART_FLEET_CLI="${CARGO_TARGET_DIR:-$root/target}/release/heart-fleet"
fi
export HEART_FLEET_CLI
echo "HEART_FLEET_CLI=$HEART_FLEET_CLI"

step "pytest (outside the source tree, against the installed wheel)"
export HEART_FLEET_REQUIRE_INSTALLED=1 PYTHONDONTWRITEBYTECODE=1
(cd "$venv" && "$venv/bin/python" -m pytest -p no:cacheprovider -q "$root/bindings-python/tests")

step "mypy --strict on a typed usage file (the wheel's py.typed and stubs) and on the package's source"
(cd "$venv" && "$venv/bin/python" -m mypy --strict --cache-dir "$venv/.mypy" "$root/bindings-python/tests/typing/usage.py")
(cd "$root/bindings-python/python" && "$venv/bin/python" -m mypy --strict --cache-dir "$venv/.mypy-src" heart_fleet)

echo
echo "python: all tests passed in $(($(date +%s) - start)) s"
