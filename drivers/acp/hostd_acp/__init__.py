"""hostd driver for Agent Client Protocol agents (JSON-RPC over the agent's stdio)."""

__version__ = "0.1.0"
#: The driver's name (its entry point, its `DriverSpec.name`, and what its errors name).
DRIVER_NAME = "acp"
