"""hostd: a long-lived local daemon that owns AI agent conversations for desktop apps."""

__version__ = "0.1.0"
