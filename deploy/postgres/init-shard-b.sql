-- Databases of the postgres-shard-b server of docker-compose.yml (run once, by the
-- postgres image's entrypoint, when the data volume is empty). Shard i is the i-th URL of
-- JOBSVC_SHARD_DB_URLS; the schema comes from `manage.py migrate_all`.
CREATE DATABASE jobsvc_shard_2 OWNER jobsvc_owner;
CREATE DATABASE jobsvc_shard_3 OWNER jobsvc_owner;
