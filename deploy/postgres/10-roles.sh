#!/bin/sh
# Roles of a PostgreSQL server of docker-compose.yml (run once, by the postgres image's
# entrypoint, when the data volume is empty; before the databases are created):
#
#   jobsvc_owner  owns the databases and every table: `manage.py migrate_all` runs as it
#   jobsvc_app    what the API and the workers connect as: rows only (30-privileges.sh)
#
# Neither is a superuser, nor may create roles or databases.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
  -v owner_password="$POSTGRES_OWNER_PASSWORD" -v app_password="$POSTGRES_APP_PASSWORD" <<'SQL'
CREATE ROLE jobsvc_owner LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'owner_password';
CREATE ROLE jobsvc_app LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'app_password';
SQL
