#!/usr/bin/env bash
# CI: the Airflow provider under a real scheduler. Starts PostgreSQL (the package is installed by
# .ci/run), gives Airflow a database on it, and runs tests/airflow/deploy: LocalExecutor, separate
# scheduler, dag-processor and api-server processes, both example DAGs triggered with
# `airflow dags trigger`. Prints how long it took. Usage: .ci/airflow_e2e.sh [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-.venv/bin/python}
start=$(date +%s)

version=$(pg_lsclusters --no-header | awk 'NR == 1 {print $1}')
cluster=$(pg_lsclusters --no-header | awk 'NR == 1 {print $2}')
if [ -z "$version" ]; then
  echo "airflow-e2e: no PostgreSQL cluster (apt-get install postgresql first)" >&2
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

# A throw-away role and database for this run (dropped first: every run starts from nothing).
password=$("$python" -c 'import secrets; print(secrets.token_hex(16))')
runuser -u postgres -- psql -q -v ON_ERROR_STOP=1 -p "$port" <<SQL
DROP DATABASE IF EXISTS runner_airflow_e2e;
DROP ROLE IF EXISTS runner_airflow_e2e;
CREATE ROLE runner_airflow_e2e LOGIN PASSWORD '$password';
CREATE DATABASE runner_airflow_e2e OWNER runner_airflow_e2e;
SQL
export RUNNER_AIRFLOW_DEPLOY_DB="postgresql+psycopg://runner_airflow_e2e:$password@127.0.0.1:$port/runner_airflow_e2e"

"$python" -m pytest tests/airflow/deploy -m airflow_deploy -p no:cacheprovider -q -ra -s
echo "ci: airflow e2e (PostgreSQL + scheduler + dag-processor + api-server) in $(( $(date +%s) - start ))s"
