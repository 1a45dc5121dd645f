#!/bin/sh
# Kafka users and ACLs of docker-compose.yml (the kafka-setup service); idempotent.
#
# Users (SCRAM-SHA-512, on the CLIENT listener, port 9092):
#   admin             super user: the migrate service creates the topics as it
#   jobsvc-scheduler  writes the jobs topic, and dead letters (its sweeper)
#   jobsvc-executor   reads the jobs topic in its consumer group, writes dead letters
#                     and the kafka handler's topics
#   jobsvc-api        describes topics and the executors' groups (the admin's cluster page)
# Anything an ACL below does not allow is refused (allow.everyone.if.no.acl.found=false).
# This script talks to the brokers' INTERNAL listener (9094) as admin over PLAIN, which
# works before any SCRAM user exists.
set -eu
BIN=/opt/kafka/bin
BOOTSTRAP=kafka-1:9094,kafka-2:9094,kafka-3:9094
JOBS=${JOBSVC_KAFKA_JOBS_TOPIC:-jobs}
DEAD=${JOBSVC_KAFKA_DEAD_LETTER_TOPIC:-jobs.dead-letter}
GROUP=${JOBSVC_EXECUTOR_GROUP_ID:-jobsvc-executors}

umask 077
CONFIG=/tmp/kafka-admin.properties
printf 'security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="%s";\n' \
  "$KAFKA_ADMIN_PASSWORD" > "$CONFIG"

user() { # name password
  "$BIN/kafka-configs.sh" --bootstrap-server "$BOOTSTRAP" --command-config "$CONFIG" \
    --alter --entity-type users --entity-name "$1" \
    --add-config "SCRAM-SHA-512=[iterations=8192,password=$2]"
}
allow() { # principal, then kafka-acls.sh arguments naming resource and operations
  principal=$1
  shift
  "$BIN/kafka-acls.sh" --bootstrap-server "$BOOTSTRAP" --command-config "$CONFIG" \
    --add --allow-principal "User:$principal" "$@"
}

user admin "$KAFKA_ADMIN_PASSWORD"
user jobsvc-scheduler "$KAFKA_SCHEDULER_PASSWORD"
user jobsvc-executor "$KAFKA_EXECUTOR_PASSWORD"
user jobsvc-api "$KAFKA_API_PASSWORD"

for topic in "$JOBS" "$DEAD"; do
  # Every process checks at start-up that the topics are as durable as configured.
  for principal in jobsvc-scheduler jobsvc-executor jobsvc-api; do
    allow "$principal" --topic "$topic" --operation Describe --operation DescribeConfigs
  done
done
allow jobsvc-scheduler --topic "$JOBS" --topic "$DEAD" --operation Write
allow jobsvc-executor --topic "$JOBS" --operation Read
allow jobsvc-executor --group "$GROUP" --operation Read
allow jobsvc-executor --topic "$DEAD" --operation Write
allow jobsvc-api --group "$GROUP" --operation Describe
# The kafka handler's topics (the operator's allow-list; users are granted some of them).
for topic in $(echo "${JOBSVC_KAFKA_HANDLER_ALLOWED_TOPICS:-}" | tr ',' ' '); do
  allow jobsvc-executor --topic "$topic" --operation Write --operation Describe
done
echo "kafka-setup: users and ACLs in place"
