"""Scheduler workers: own shards through ZooKeeper, dispatch due jobs to Kafka fairly."""
