"""`python -m hostd` is the `hostd` command."""

from hostd.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
