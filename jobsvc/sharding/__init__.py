"""Which database holds what: job ids, shard aliases and the database router."""
