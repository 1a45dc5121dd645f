"""The load generator: ``python -m tools.loadgen`` (see ``__main__``).

It drives a running system through its public API and watches the jobs it created:

- ``pacing``: when each create request goes out, for a target rate in jobs per second;
- ``client``: keep-alive HTTP to the API (``http.client``), one connection per sender;
- ``users``: the run's users, created with their weights in the control database, then
  logged in through the API;
- ``tracker``: the created jobs by due time, and which of the due ones finished since the
  last look (one query per shard, by primary key, through an injected lookup);
- ``stats``: percentiles, the per-second line and the end-of-run summary;
- ``runner``: the sender threads and the once-a-second observer, ``run()`` / ``stop()``.

Only ``users`` and ``database`` touch Django; the rest is plain Python and unit-tested.
"""
