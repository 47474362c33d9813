#!/usr/bin/env bash
# Sourced by the test scripts: installs (Debian's package) and starts a PostgreSQL server
# when none answers, creates role `heart` and database `heart_test`, exports DATABASE_URL.
ensure_postgres() {
  export DATABASE_URL="${DATABASE_URL:-postgres://heart:heart@127.0.0.1:5432/heart_test}"
  if ! command -v pg_ctlcluster >/dev/null 2>&1 || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    echo "installing postgresql from Debian's packages"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
  local version
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  if ! pg_isready -q -h 127.0.0.1 -p 5432; then
    pg_ctlcluster "$version" main start || true
  fi
  for _ in $(seq 1 60); do
    pg_isready -q -h 127.0.0.1 -p 5432 && break
    sleep 1
  done
  pg_isready -h 127.0.0.1 -p 5432
  su postgres -c "psql -qtAc \"SELECT 1 FROM pg_roles WHERE rolname='heart'\"" | grep -q 1 \
    || su postgres -c "psql -qc \"CREATE ROLE heart LOGIN SUPERUSER PASSWORD 'heart'\""
  su postgres -c "psql -qtAc \"SELECT 1 FROM pg_database WHERE datname='heart_test'\"" | grep -q 1 \
    || su postgres -c "createdb -O heart heart_test"
}
