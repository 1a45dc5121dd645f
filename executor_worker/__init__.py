"""Executor workers: claim each published job, run its handler, record the outcome."""
