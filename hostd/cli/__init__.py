"""The `hostd` command line. Only this package imports rich."""
