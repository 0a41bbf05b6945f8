#!/bin/sh
# Creates MLflow's database beside the Optuna one (POSTGRES_DB). They cannot share one database: Optuna
# and MLflow both migrate their schema with Alembic and both keep it in a table named alembic_version.
#
# The postgres image runs this once, when it initialises an empty data volume (it sources the file when
# it is not executable, so no `set -u` or `exit` on the success path). For a volume made before this
# script existed: docker compose exec postgres createdb -U "$POSTGRES_USER" "$MLFLOW_DB"
set -e

if [ -z "${MLFLOW_DB}" ] || [ "${MLFLOW_DB}" = "${POSTGRES_DB}" ]; then
    echo "MLFLOW_DB must be set and differ from POSTGRES_DB (${POSTGRES_DB}): both keep an alembic_version table" >&2
    exit 1
fi

psql -v ON_ERROR_STOP=1 --username "${POSTGRES_USER}" --dbname "${POSTGRES_DB}" \
    --set=db="${MLFLOW_DB}" --set=owner="${POSTGRES_USER}" <<'SQL'
CREATE DATABASE :"db" OWNER :"owner";
SQL
