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

# TLS for the PostgreSQL server: a private CA (made once, kept in
# /var/lib/postgresql/heart-tls) and a server certificate it signs for 127.0.0.1 / localhost,
# installed as the server's certificate; the CA is exported as HEART_PG_TLS_CA, the root a
# client verifies the server with (`sslrootcert`).
ensure_postgres_tls() {
  local dir=/var/lib/postgresql/heart-tls
  command -v openssl >/dev/null 2>&1 || {
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null
  }
  if [ ! -s "$dir/server.crt" ] || [ ! -s "$dir/ca.crt" ]; then
    rm -rf "$dir"
    mkdir -p "$dir"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=heart-fleet test CA" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -keyout "$dir/ca.key" -out "$dir/ca.crt" >/dev/null 2>&1
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout "$dir/server.key" -out "$dir/server.csr" >/dev/null 2>&1
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > "$dir/server.ext"
    openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial -days 3650 \
      -extfile "$dir/server.ext" -out "$dir/server.crt" >/dev/null 2>&1
    chown -R postgres:postgres "$dir"
    chmod 600 "$dir/server.key" "$dir/ca.key"
  fi
  local current
  current=$(su postgres -c "psql -qtAc 'SHOW ssl_cert_file'")
  if [ "$current" != "$dir/server.crt" ]; then
    su postgres -c "psql -qc \"ALTER SYSTEM SET ssl = on\" -c \"ALTER SYSTEM SET ssl_cert_file = '$dir/server.crt'\" -c \"ALTER SYSTEM SET ssl_key_file = '$dir/server.key'\"" >/dev/null
  fi
  # Always: the files may be new under the same names.
  su postgres -c "psql -qtAc 'SELECT pg_reload_conf()'" >/dev/null
  export HEART_PG_TLS_CA="$dir/ca.crt"
}

# PgBouncer (Debian's package) in transaction pooling mode on 127.0.0.1:6432, in front of the
# server above, with a pool of 2 server connections per database: the mode of Supabase's pooled
# connection string, where named prepared statements and session state do not follow a client.
# Exports HEART_PGBOUNCER_URL (database heart_pooler, created fresh, reached through the pooler).
ensure_pgbouncer() {
  command -v pgbouncer >/dev/null 2>&1 || {
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null
  }
  local dir=/tmp/heart-pgbouncer
  mkdir -p "$dir"
  cat > "$dir/pgbouncer.ini" <<INI
[databases]
* = host=127.0.0.1 port=5432
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = 6432
auth_type = trust
auth_file = $dir/users.txt
pool_mode = transaction
default_pool_size = 2
max_client_conn = 200
ignore_startup_parameters = extra_float_digits
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
  echo '"heart" "heart"' > "$dir/users.txt"
  chown -R postgres:postgres "$dir"
  if ! pg_isready -q -h 127.0.0.1 -p 6432; then
    # The binary's full path: su's PATH for a non-root user may lack /usr/sbin.
    su postgres -c "$(command -v pgbouncer) -d $dir/pgbouncer.ini"
    for _ in $(seq 1 30); do
      pg_isready -q -h 127.0.0.1 -p 6432 && break
      sleep 0.5
    done
  fi
  pg_isready -h 127.0.0.1 -p 6432
  su postgres -c "psql -qc 'DROP DATABASE IF EXISTS heart_pooler WITH (FORCE)' -c 'CREATE DATABASE heart_pooler OWNER heart'" >/dev/null
  export HEART_PGBOUNCER_URL="postgres://heart:heart@127.0.0.1:6432/heart_pooler"
}
