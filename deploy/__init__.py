"""Deployment tooling: the local stack launcher (`deploy.localstack`) and the gunicorn config."""
