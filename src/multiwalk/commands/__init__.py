"""Subcommands of the ``multiwalk`` command line that live in modules of their own.

Each module has ``add_parser(commands)`` (``commands`` is argparse's subparsers object), which adds
its subparser and sets ``handler(args, parser) -> exit status`` and ``command_parser`` as defaults;
:data:`multiwalk.cli.SUBCOMMAND_MODULES` lists them.  Exit statuses follow :mod:`multiwalk.cli`:
0 success, 1 failure, 2 bad options, 130 Ctrl-C.
"""
