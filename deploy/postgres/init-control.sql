-- Databases of the postgres-control server of docker-compose.yml (run once, by the
-- postgres image's entrypoint, when the data volume is empty): users, auth and admin.
CREATE DATABASE jobsvc_control OWNER jobsvc_owner;
