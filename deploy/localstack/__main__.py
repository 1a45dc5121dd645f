"""`python -m deploy.localstack`: see `deploy.localstack.cli`."""

from __future__ import annotations

from .cli import main

raise SystemExit(main())
