"""``python -m webhook.cli``: the ``vramgate`` command."""

from .main import main

raise SystemExit(main())
