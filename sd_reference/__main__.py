"""Entry point for `python -m sd_reference`: only hands over to the CLI."""

from sd_reference.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
