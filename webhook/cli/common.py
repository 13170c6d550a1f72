"""What every command of the CLI shares: its usage error, its exit codes and the catalog it judges with."""

from __future__ import annotations

from ..config import Config
from ..models.catalog import Catalog, builtin_catalog

EXIT_OK, EXIT_REJECTED, EXIT_BAD_INPUT = 0, 1, 2


class UsageError(Exception):
    """Bad input on the command line: exit 2 with a one-line message."""


def catalog_for(config: Config) -> Catalog:
    """The built-in model catalog with the config's own models added."""
    base = builtin_catalog()
    return base.with_entries(config.models) if config.models else base
