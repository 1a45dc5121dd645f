"""`make chaos`: the whole system under a nemesis, and a check of what users saw.

Jepsen style, on a throwaway stack of real servers (two PostgreSQL servers holding the
control database and 4 shards, optionally each with a synchronous standby; ZooKeeper;
Apache Kafka; the API under gunicorn; 2 schedulers; 2 executors):

- `workload`: a client creates jobs through the public API (half `http` to the local
  `receiver`, which records every delivery with its time, half the no-op `default`);
  only jobs whose create was acknowledged enter the history. With `--burst N` a fourth
  user also creates N jobs due at once every 5 s, a backlog the executors take from each
  other (work stealing).
- `faults`: the nemesis. One fault at a time: SIGKILL or SIGSTOP (past the ZooKeeper
  session) of a scheduler, an executor and the API; every database session cut; a shard
  server restarted; the control server restarted; ZooKeeper restarted; the broker
  SIGKILLed and started again (it keeps every message); with `--replicas 1`, a primary
  SIGKILLed and its standby promoted.
- `runner`: one pass of every fault, then a mixed phase drawn with a printed seed; after
  each fault it waits until every shard runs jobs again.
- `history` reads the outcome back from the shards; `checker` classifies every job (lost,
  duplicate, re-run, early, late) and measures recovery per fault; `report` writes the
  markdown table and the JSON.

    python -m tools.chaos [--replicas 1] [--short] [--seed N] [--mixed N] [--burst N]

Exit status 1 when any job is lost, delivered twice for one attempt, or started early.
"""
