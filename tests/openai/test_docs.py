"""The driver's documentation matches the code: `hostd drivers openai` names every option,
and the README's "use a local model" assistant file is valid."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from hostd.core.assistants import parse_assistant
from hostd_openai.config import OpenAIOptions, parse_options
from hostd_openai.spec import OPTIONS_HELP, SPEC
from hostd_protocol.errors import InvalidArgument

README = Path(__file__).resolve().parents[2] / "drivers" / "openai" / "README.md"


def test_options_help_names_every_option() -> None:
    assert [o for o, _ in OPTIONS_HELP] != []
    assert {o for o, _ in OPTIONS_HELP} == set(OpenAIOptions.__struct_encode_fields__)


def test_readme_assistants_are_valid() -> None:
    blocks = re.findall(r"```toml\n(.*?)```", README.read_text(), re.S)
    assistant = parse_assistant("local", blocks[0])
    assert (assistant.driver, assistant.model) == ("openai", "qwen3:8b")
    opts, unknown = parse_options(dict(assistant.options))
    assert unknown == [] and "time" in opts.mcp_servers


def test_hostd_drivers_openai_shows_the_options() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "hostd", "drivers", "openai"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    ).stdout
    assert "python -m hostd_openai" in out
    assert "the variable named by `api_key_env`" in out
    assert "options (an assistant's [options])" in out
    assert "secrets by reference: ${NAME} in mcp_servers, mcpServers (or in the file" in out
    assert "from secrets.env in the config dir" in out
    for option, _ in OPTIONS_HELP:
        assert option in out, option
    bad = subprocess.run(
        [sys.executable, "-m", "hostd", "drivers", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 1
    assert bad.stderr.startswith("hostd: no driver named 'nope' is installed")
    assert len(bad.stderr.strip().splitlines()) == 1


def test_options_are_checked_before_the_driver_starts() -> None:
    SPEC.check_options({"base_url": "http://127.0.0.1:1/v1", "allowed_tools": ["t__*"]})
    with pytest.raises(
        InvalidArgument,
        match=r"^unknown option 'api_key' for driver 'openai' "
        r"\(did you mean 'api_key_env'\?\)",
    ):
        SPEC.check_options({"api_key": "sk-..."})
    with pytest.raises(InvalidArgument):
        SPEC.check_options({"max_steps": "many"})
