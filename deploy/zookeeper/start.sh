#!/bin/sh
# ZooKeeper of docker-compose.yml, with SASL: the one user `jobsvc` (DIGEST-MD5), whose
# password comes from ZOOKEEPER_JOBSVC_PASSWORD. Writes the JAAS file SERVER_JVMFLAGS
# names, then runs the image's own entrypoint and command.
set -eu
umask 077
cat > /tmp/zookeeper-jaas.conf <<JAAS
Server {
  org.apache.zookeeper.server.auth.DigestLoginModule required
  user_jobsvc="${ZOOKEEPER_JOBSVC_PASSWORD}";
};
JAAS
chown zookeeper /tmp/zookeeper-jaas.conf 2>/dev/null || true
exec /docker-entrypoint.sh zkServer.sh start-foreground
