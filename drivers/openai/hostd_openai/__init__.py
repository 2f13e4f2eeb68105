"""hostd's OpenAI-compatible driver: the model + tool loop (MCP tools) in a driver process.

See drivers/openai/README.md.
"""

__version__ = "0.1.0"
