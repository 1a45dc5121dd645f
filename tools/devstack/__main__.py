"""`python -m tools.devstack`: see `tools.devstack.cli`."""

from __future__ import annotations

from .cli import main

raise SystemExit(main())
