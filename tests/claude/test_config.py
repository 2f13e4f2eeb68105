"""Options, CLI environment and the entry-point spec of the Claude Code driver (no CLI)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from hostd_claude_code.config import (
    MAX_TMPDIR_LEN,
    QUIET_ENV,
    ClaudeCodeOptions,
    cli_env,
    cli_paths,
    parse_options,
)
from hostd_claude_code.spec import SPEC
from hostd_protocol.driver_spec import ENTRY_POINT_GROUP, DriverSpec
from hostd_protocol.errors import InvalidArgument


def test_entry_point_names_the_spec() -> None:
    (ep,) = [e for e in entry_points(group=ENTRY_POINT_GROUP) if e.name == "claude-code"]
    assert ep.value == "hostd_claude_code.spec:SPEC"
    spec = ep.load()
    assert isinstance(spec, DriverSpec) and spec is SPEC
    assert spec.module == "hostd_claude_code"
    assert {"ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"} <= set(spec.env)


def test_spec_and_driver_modules_do_not_import_the_sdk() -> None:
    code = (
        "import sys, hostd_claude_code.spec, hostd_claude_code.driver, hostd_claude_code.config\n"
        "print('claude_agent_sdk' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30
    )
    assert out.stdout.strip() == "False"


def test_options_are_validated_and_unknown_keys_reported() -> None:
    opts, unknown = parse_options({"permission_mode": "acceptEdits", "colour": "blue"})
    assert opts.permission_mode == "acceptEdits" and unknown == ["colour"]
    with pytest.raises(InvalidArgument, match=r"^invalid claude-code option: Expected `int"):
        parse_options({"max_turns": "many"})
    with pytest.raises(
        InvalidArgument, match=r"^invalid claude-code option: interrupt_grace must be > 0$"
    ):
        parse_options({"interrupt_grace": 0})


def test_cli_files_stay_under_the_topic(tmp_path: Path) -> None:
    short = Path(tempfile.mkdtemp(prefix="hcc", dir="/tmp"))  # tmp_path is too deep
    try:
        check_paths(short)
    finally:
        shutil.rmtree(short, ignore_errors=True)


def check_paths(short: Path) -> None:
    paths = cli_paths(str(short), ClaudeCodeOptions())
    assert not paths.private_tmpdir
    assert paths.cwd == short.resolve()
    assert paths.home == short.resolve() / ".hostd-claude"
    assert paths.config_dir == paths.home / ".claude" and paths.tmpdir == paths.home / "tmp"
    env = cli_env(paths, ClaudeCodeOptions(env={"DISABLE_TELEMETRY": "0"}), {}, is_root=True)
    assert env["HOME"] == str(paths.home)
    assert env["CLAUDE_CONFIG_DIR"] == str(paths.config_dir)
    assert env["TMPDIR"] == env["CLAUDE_CODE_TMPDIR"] == str(paths.tmpdir)
    assert env["DISABLE_TELEMETRY"] == "0"  # options win
    assert "IS_SANDBOX" not in env
    assert {k: env[k] for k in QUIET_ENV if k != "DISABLE_TELEMETRY"} == {
        k: v for k, v in QUIET_ENV.items() if k != "DISABLE_TELEMETRY"
    }
    bypass = ClaudeCodeOptions(permission_mode="bypassPermissions")
    assert cli_env(paths, bypass, {}, is_root=True)["IS_SANDBOX"] == "1"
    assert "IS_SANDBOX" not in cli_env(paths, bypass, {}, is_root=False)


def test_a_long_temp_dir_moves_somewhere_short(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * MAX_TMPDIR_LEN)
    paths = cli_paths(str(deep), ClaudeCodeOptions())
    try:
        assert paths.private_tmpdir
        assert len(str(paths.tmpdir)) <= MAX_TMPDIR_LEN and paths.tmpdir.is_dir()
    finally:
        shutil.rmtree(paths.tmpdir)
    assert paths.config_dir == deep / ".hostd-claude" / ".claude"


@pytest.mark.parametrize(
    ("environ", "files", "proxied"),
    [
        ({"ANTHROPIC_API_KEY": "sk-env"}, {}, "sk-env"),
        ({}, {".claude.json": {"primaryApiKey": "sk-console"}}, "sk-console"),
        ({}, {".claude/.credentials.json": {"claudeAiOauth": {"accessToken": "t"}}}, None),
        ({"CLAUDE_CODE_OAUTH_TOKEN": "tok"}, {}, "Bearer tok"),
        ({"ANTHROPIC_AUTH_TOKEN": "tok"}, {}, "Bearer tok"),
        ({"ANTHROPIC_API_KEY": "sk-env", "CLAUDE_CODE_USE_BEDROCK": "1"}, {}, None),
    ],
)
def test_only_an_api_key_is_kept_out_of_the_sandbox(
    tmp_path: Path, environ: dict[str, str], files: dict[str, object], proxied: str | None
) -> None:
    import json

    from hostd_claude_code.credentials import proxy_credential

    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(json.dumps(data))
    env = {"HOME": str(tmp_path), **environ}
    found = proxy_credential(env, {})
    assert (found.value if found else None) == proxied
    if found is not None:
        assert found.upstream == "https://api.anthropic.com"
        assert found.sandbox_read == ()  # ~/.claude.json (the Console key) stays hidden
        assert "sk-" not in repr(found)
        with_base = proxy_credential({**env, "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}, {})
        assert with_base is not None and with_base.upstream == "http://127.0.0.1:9"
        # The topic's own key or base URL: the daemon's key is not involved.
        assert proxy_credential(env, {"env": {"ANTHROPIC_BASE_URL": "http://x"}}) is None
    summary = SPEC.check_credentials(env)
    assert summary is not None
    expect = "kept out of the sandbox" if proxied else "confined: readable by tools"
    assert expect in summary.summary
