"""``python -m lamina.cli``."""

from lamina.cli import app

app()
