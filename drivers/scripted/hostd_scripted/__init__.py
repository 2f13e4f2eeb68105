"""hostd's scripted driver: a real driver process that plays deterministic scenarios.

See drivers/scripted/README.md for the directive language.
"""

__version__ = "0.1.0"
