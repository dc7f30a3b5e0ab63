#!/usr/bin/env bash
# CI: the Airflow provider under a real scheduler. Starts PostgreSQL (the package is installed by
# .ci/run), gives Airflow a database on it and the runner another (its shared store: run store,
# shard journals, cap ledger), and runs tests/airflow/deploy: LocalExecutor, separate scheduler,
# dag-processor, api-server and triggerer processes, the example DAGs triggered with `airflow dags
# trigger`, retries on a wiped local disk, a fan-out cost cap across shards, a provider batch
# waited for in the triggerer (the task deferred, the triggerer restarted), a deferred task marked
# failed, a backfill, a cleared task, `airflow tasks test`; the runner installed from its built wheel,
# the project read-only, every Airflow process as a non-root user. About 4 minutes. Prints how long it took.
# Usage: .ci/airflow_e2e.sh [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-.venv/bin/python}
start=$(date +%s)

pg_who=airflow-e2e
# shellcheck source=.ci/postgres.sh
source .ci/postgres.sh

# A throw-away role and two databases for this run (dropped first: every run starts from nothing):
# Airflow's metadata, and the runner's shared store (reached through an Airflow connection).
# RUNNER_E2E_DB renames them, so two checkouts on one machine do not drop each other's.
name=${RUNNER_E2E_DB:-runner_airflow_e2e}
password=$("$python" -c 'import secrets; print(secrets.token_hex(16))')
runuser -u postgres -- psql -q -v ON_ERROR_STOP=1 -p "$port" <<SQL
DROP DATABASE IF EXISTS ${name} WITH (FORCE);
DROP DATABASE IF EXISTS ${name}_store WITH (FORCE);
DROP ROLE IF EXISTS ${name};
CREATE ROLE ${name} LOGIN PASSWORD '$password';
CREATE DATABASE ${name} OWNER ${name};
CREATE DATABASE ${name}_store OWNER ${name};
SQL
export RUNNER_AIRFLOW_DEPLOY_DB="postgresql+psycopg://${name}:$password@127.0.0.1:$port/${name}"
export RUNNER_AIRFLOW_DEPLOY_STORE="postgresql://${name}:$password@127.0.0.1:$port/${name}_store"

# Every Airflow process (and so every task) runs as this unprivileged system user, as a
# deployment runs them: no home directory, no access to /root (where CI's Python lives: the
# test binds the interpreter into the processes' mount namespace), the project read-only.
user=${RUNNER_E2E_USER:-runner-airflow}
id -u "$user" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$user"
export RUNNER_AIRFLOW_DEPLOY_USER=$user

"$python" -m pytest tests/airflow/deploy -m airflow_deploy -p no:cacheprovider -q -ra -s
echo "ci: airflow e2e (PostgreSQL + scheduler + dag-processor + api-server + triggerer) in $(( $(date +%s) - start ))s"
