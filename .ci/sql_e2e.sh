#!/usr/bin/env bash
# CI: the daily report from a real PostgreSQL. Starts PostgreSQL the way .ci/airflow_e2e.sh
# does (the package is installed by .ci/run), creates a throw-away database and owner, seeds
# it from examples/data/sales.csv with scripts/seed_sales_db.py (which also creates a role
# that may only read it), and runs the tests marked `postgres`: the report's figures equal
# the CSV run's, and an agent's DELETE through sql_query is refused with the data unchanged.
# Usage: .ci/sql_e2e.sh [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-.venv/bin/python}
start=$(date +%s)

pg_who=sql-e2e
# shellcheck source=.ci/postgres.sh
source .ci/postgres.sh

# A throw-away owner, reader and database for this run (dropped first: every run starts from nothing).
owner_password=$("$python" -c 'import secrets; print(secrets.token_hex(16))')
export RUNNER_TEST_SALES_DB_PASSWORD=$("$python" -c 'import secrets; print(secrets.token_hex(16))')
runuser -u postgres -- psql -q -v ON_ERROR_STOP=1 -p "$port" <<SQL
DROP DATABASE IF EXISTS runner_sales_e2e;
DROP ROLE IF EXISTS runner_sales_e2e_reader;
DROP ROLE IF EXISTS runner_sales_e2e;
CREATE ROLE runner_sales_e2e LOGIN CREATEROLE PASSWORD '$owner_password';
CREATE DATABASE runner_sales_e2e OWNER runner_sales_e2e;
SQL
export SALES_DB_ADMIN_URL="postgresql+psycopg://runner_sales_e2e:$owner_password@127.0.0.1:$port/runner_sales_e2e"
"$python" scripts/seed_sales_db.py --url-env SALES_DB_ADMIN_URL \
  --reader runner_sales_e2e_reader --reader-password-env RUNNER_TEST_SALES_DB_PASSWORD
unset SALES_DB_ADMIN_URL
export RUNNER_TEST_SALES_DB_URL="postgresql+psycopg://runner_sales_e2e_reader@127.0.0.1:$port/runner_sales_e2e"

"$python" -m pytest tests/sql -m postgres -p no:cacheprovider -q -ra
echo "ci: sql e2e (PostgreSQL source, daily report, read-only agent) in $(( $(date +%s) - start ))s"
