"""The `raydbg` subcommands of each feature (layer 5), on the small CLI base in commands.base.

raydbg/cli.py builds the argparse parser from each module's `register(subparsers)`.
Nothing below layer 5 imports this package.
"""
