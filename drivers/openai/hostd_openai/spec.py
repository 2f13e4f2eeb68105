"""The `hostd.drivers` entry point of the OpenAI-compatible driver (imports nothing heavy)."""

from __future__ import annotations

from hostd_openai import __version__
from hostd_protocol.driver_spec import DriverSpec

#: Variables passed on from the daemon's environment. The API key is read only from the
#: variable the assistant names in `api_key_env` (default `OPENAI_API_KEY`); the daemon passes
#: that variable to this driver only (`DriverSpec.env_options`), and redacts its value from
#: everything the driver says.
ENV: tuple[str, ...] = ("OPENAI_API_KEY", "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "LANG")

SPEC = DriverSpec(
    name="openai",
    module="hostd_openai",
    description="OpenAI-compatible Chat Completions (hosted or local: Ollama, llama.cpp, vLLM) "
    "with tools from MCP servers",
    version=__version__,
    env=ENV,
    env_options=("api_key_env",),
)
