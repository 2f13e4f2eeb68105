"""hostd driver for Agent Client Protocol agents (JSON-RPC over the agent's stdio)."""

__version__ = "0.1.0"
