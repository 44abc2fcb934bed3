"""`python -m preflight`: the same as the `preflight` console script."""

from preflight.commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
