#!/bin/sh
# Privileges in each jobsvc database of this server (run once, by the postgres image's
# entrypoint, after 20-databases.sql created them):
#
# - nobody but the two roles may connect;
# - only jobsvc_owner may create objects in the public schema (the migrations);
# - jobsvc_app may read and write the rows of every table jobsvc_owner creates, now or
#   later, and use their sequences: no DDL, no TRUNCATE, no ownership. Prepared
#   transactions (bulk requests spread over shards) need nothing more: a role may commit
#   or roll back what it prepared itself.
set -eu
for database in $(psql --username "$POSTGRES_USER" --dbname postgres -At \
    -c "SELECT datname FROM pg_database WHERE datname LIKE 'jobsvc\_%'"); do
  psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$database" <<SQL
REVOKE ALL ON DATABASE "$database" FROM PUBLIC;
GRANT CONNECT ON DATABASE "$database" TO jobsvc_owner, jobsvc_app;
REVOKE ALL ON SCHEMA public FROM PUBLIC;
ALTER SCHEMA public OWNER TO jobsvc_owner;
GRANT USAGE ON SCHEMA public TO jobsvc_app;
ALTER DEFAULT PRIVILEGES FOR ROLE jobsvc_owner IN SCHEMA public
  GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO jobsvc_app;
ALTER DEFAULT PRIVILEGES FOR ROLE jobsvc_owner IN SCHEMA public
  GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO jobsvc_app;
SQL
done
