# Sourced by the CI scripts that need the machine's PostgreSQL (the package is installed by
# .ci/run): starts its first cluster if it is not online, stops it again on exit if started
# here, and sets $port. The caller sets $pg_who (its name, for the error message).
version=$(pg_lsclusters --no-header | awk 'NR == 1 {print $1}')
cluster=$(pg_lsclusters --no-header | awk 'NR == 1 {print $2}')
if [ -z "$version" ]; then
  echo "${pg_who:-ci}: no PostgreSQL cluster (apt-get install postgresql first)" >&2
  exit 1
fi
started_here=""
if ! pg_lsclusters --no-header | awk 'NR == 1 {print $4}' | grep -q online; then
  pg_ctlcluster "$version" "$cluster" start
  started_here=1
fi
stop_postgres() { if [ -n "$started_here" ]; then pg_ctlcluster "$version" "$cluster" stop || true; fi; }
trap stop_postgres EXIT
port=$(pg_lsclusters --no-header | awk 'NR == 1 {print $3}')
