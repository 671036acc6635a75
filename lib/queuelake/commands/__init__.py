"""Command implementations behind ``cli.py`` and ``jobs/*.py``: each returns a summary dict."""
