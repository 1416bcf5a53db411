#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests, from Debian's packages.
#   scripts/postgres.sh start DIR   initdb in DIR, start on a free loopback port, print its URL
#                                   (TLS on too, with a self-signed certificate for 127.0.0.1
#                                   signed by DIR/ca.crt, for tests of sslmode=verify-full)
#   scripts/postgres.sh stop DIR    stop it (the directory is left for the caller to remove)
#   scripts/postgres.sh resume DIR  start a stopped one again, on the same port
# As root, the server runs as the `postgres` user the package creates (initdb refuses root).
set -euo pipefail

bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [ -z "$bin" ]; then
  echo "PostgreSQL is not installed: apt-get install -y postgresql" >&2
  exit 1
fi
as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "${1:-}" in
start)
  dir=$(realpath -m "$2")
  mkdir -p "$dir"
  [ "$(id -u)" = 0 ] && chown postgres: "$dir"
  as_owner "$bin/initdb" --pgdata="$dir/data" --username=halite --auth=trust --encoding=UTF8 \
    --locale=C.UTF-8 --no-sync >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
  # A CA and a server certificate it signed for 127.0.0.1 (webpki refuses a CA as the server's).
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=halite-test-ca \
    -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' >"$dir/server.ext"
  openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial -days 2 \
    -extfile "$dir/server.ext" -out "$dir/server.crt" 2>/dev/null
  chmod 600 "$dir/server.key"
  [ "$(id -u)" = 0 ] && chown postgres: "$dir/server.key" "$dir/server.crt"
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  # fsync off: the data is thrown away, and a restart in a test is a clean stop anyway.
  echo "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c max_connections=500 -c ssl=on -c ssl_cert_file=$dir/server.crt -c ssl_key_file=$dir/server.key" >"$dir/options"
  as_owner "$bin/pg_ctl" --pgdata="$dir/data" --log="$dir/server.log" --wait --silent -o "$(cat "$dir/options")" start >&2
  echo "postgres://halite@127.0.0.1:$port/postgres"
  ;;
resume)
  dir=$(realpath -m "$2")
  as_owner "$bin/pg_ctl" --pgdata="$dir/data" --log="$dir/server.log" --wait --silent -o "$(cat "$dir/options")" start >&2
  ;;
stop)
  dir=$(realpath -m "$2")
  as_owner "$bin/pg_ctl" --pgdata="$dir/data" --mode=fast --wait --silent stop >&2 || true
  ;;
*)
  echo "usage: $0 start|stop|resume DIR" >&2
  exit 2
  ;;
esac
