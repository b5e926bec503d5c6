"""The ``drill`` command line: one module per subcommand, wired in :mod:`drill.cli.main`."""
