"""``python -m lamina.cli``."""

from lamina.cli import run

run()
