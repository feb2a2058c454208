"""The `raydbg` subcommands (layer 5), one module each (or one per feature), on the small CLI base in commands.base.

Each module has `register(subparsers)`; raydbg/cli.py lists the modules and builds the
parser from them. Nothing below layer 5 imports this package.
"""
