"""`make chaos`: the whole system under a nemesis, and a check of what users saw.

Jepsen style, on a throwaway stack of real servers (two PostgreSQL servers holding the
control database and 4 shards, optionally each with a synchronous standby; ZooKeeper;
Apache Kafka; the API under gunicorn; 2 schedulers; 2 executors). docs/chaos.md is the
guide.

- `workload`: a client creates jobs through the public API (half `http` to the local
  `receiver`, which records every delivery with its time, half the no-op `default`);
  only jobs whose create was acknowledged enter the history. With `--burst N` a fourth
  user also creates N jobs due at once every 5 s.
- The nemesis: `faults` (processes killed and paused, sessions cut, servers restarted, a
  failover), `partitions` (an app cut off from a server by `firewall`), `clock_skew` (a
  worker's wall clock moved by the `clock_shift.c` shim), `full_disk` (a shard server's
  tmpfs from `disk` filled); `catalogue` lists them; `probes` is the client a fault's
  check sends requests as.
- `runner`: one pass of every fault, then a mixed phase drawn with a printed seed (one
  fault, or two at once); after each fault it waits until every shard runs jobs again.
- `history` reads the outcome back from the shards; `checker` classifies every job (lost,
  duplicate, re-run, early, late), measures its lateness against the bound and each
  fault's recovery; `report` writes the markdown table and the JSON.

    python -m tools.chaos [--replicas 1] [--short] [--seed N] [--mixed N] [--burst N]
                          [--only NAMES] [--bound SECONDS]

Exit status 1 when any job is lost, delivered twice for one attempt, or started early,
when a fault's jobs start later than the bound, or when a fault's check fails.
"""
