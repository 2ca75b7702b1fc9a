"""Subcommands of the ``selfheal`` console script, one module each (see ``cli.py``)."""
