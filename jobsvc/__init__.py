"""jobsvc: a sharded, fair-share job scheduling service (the API and what it shares with
the workers). The release's version is this one (pyproject.toml reads it)."""

__version__ = "0.2.0"
