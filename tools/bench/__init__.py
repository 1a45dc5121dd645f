"""Benchmarks that drive a running stack through its public API."""
