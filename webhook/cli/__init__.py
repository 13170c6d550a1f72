"""The commands: ``vramgate`` and its subcommands, audit and report output, and the kubectl plugin."""
