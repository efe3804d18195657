# Sourced by scripts/test and scripts/bench: `start_postgres [durable]` starts a throwaway
# PostgreSQL cluster on a loopback port (without fsync, for tests, unless `durable`), exports PLANWRIGHT_PG_URL (a URL whose user may create
# databases), and removes the cluster when the calling script exits. PostgreSQL is
# installed first when running as root on Debian/Ubuntu and it is missing.

find_pg_bin() {
  local dir
  for dir in /usr/lib/postgresql/*/bin; do
    if [ -x "$dir/initdb" ]; then echo "$dir"; return 0; fi
  done
  if command -v initdb >/dev/null 2>&1; then dirname "$(command -v initdb)"; return 0; fi
  return 1
}

stop_postgres() {
  $PG_AS "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$PG_DIR"
}

start_postgres() {
  if ! PG_BIN=$(find_pg_bin); then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
      PG_BIN=$(find_pg_bin)
    else
      echo "PostgreSQL is needed: install it, or name a server with PLANWRIGHT_TEST_DATABASE_URL" >&2
      exit 1
    fi
  fi
  PG_DIR=$(mktemp -d /tmp/planwright-pg.XXXXXX)
  PG_AS=""
  if [ "$(id -u)" = 0 ]; then
    # PostgreSQL refuses to run as root.
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    chown postgres "$PG_DIR"
    PG_AS="runuser -u postgres --"
  fi
  local port fast=""
  if [ "${1:-}" != durable ]; then
    fast="-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
  fi
  $PG_AS "$PG_BIN/initdb" -D "$PG_DIR/data" -U postgres --auth=trust -E UTF8 >/dev/null
  trap stop_postgres EXIT
  # A random loopback port; another one if it is taken.
  for _ in 1 2 3 4 5; do
    port=$((20000 + RANDOM % 40000))
    if $PG_AS "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/log" -w start \
      -o "-p $port -k $PG_DIR -c listen_addresses=127.0.0.1 -c max_connections=400 $fast" >/dev/null; then
      export PLANWRIGHT_PG_URL="postgres://postgres@127.0.0.1:$port/postgres"
      return 0
    fi
  done
  echo "Could not start PostgreSQL (log: $PG_DIR/log)" >&2
  cat "$PG_DIR/log" >&2 || true
  exit 1
}
