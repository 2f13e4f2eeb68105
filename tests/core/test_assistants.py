"""Assistant and roles files: parsing, and errors that name file and line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hostd.core.assistants import (
    AssistantConfig,
    RoleTarget,
    Workdir,
    default_assistant,
    key_line,
    parse_assistant,
    parse_roles,
)
from hostd.shell.config import load_assistants, load_roles
from hostd_protocol.errors import ConfigError

GOOD = """\
description = "Writes code"
model = "use::coding"
system_prompt = "You write code."
history_size = 20
workdir = { policy = "fixed", path = "~/src" }

[options]
permission_mode = "acceptEdits"
metadata = { team = "core" }

[hooks]
create = "my_hooks:on_create"
next = "my_hooks.sub:on_next"
"""


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def test_parse_a_full_assistant() -> None:
    cfg = parse_assistant("coder", GOOD, "coder.toml")
    assert cfg == AssistantConfig(
        name="coder",
        description="Writes code",
        model="use::coding",
        system_prompt="You write code.",
        history_size=20,
        workdir=Workdir(policy="fixed", path="~/src"),
        options={"permission_mode": "acceptEdits", "metadata": {"team": "core"}},
        create_hook="my_hooks:on_create",
        next_hook="my_hooks.sub:on_next",
        source="coder.toml",
    )
    assert cfg.role == "coding"


def test_defaults_and_workdir_shorthand() -> None:
    cfg = parse_assistant("plain", 'driver = "scripted"\nworkdir = "ephemeral"\n')
    assert cfg.workdir == Workdir(policy="ephemeral")
    assert cfg.history_size == 50 and cfg.role is None and cfg.options == {}


def test_syntax_error_names_file_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path / "assistants", "bad.toml", 'driver = "x"\nmodel = \n')
    with pytest.raises(ConfigError) as info:
        load_assistants(tmp_path).get("bad")
    err = info.value
    assert re.match(rf"^{re.escape(str(path))}:2:\d+: invalid TOML: ", err.message)
    assert err.details["line"] == 2 and err.details["file"] == str(path)


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ('driver = "x"\nmodle = "y"\n', 2, "modle: unknown key"),
        (
            'driver = "x"\n\n[hooks]\ncreate = "not a hook"\n',
            4,
            "hooks.create: must be 'module:function'",
        ),
        ('driver = "x"\n[hooks]\nbefore = "a:b"\n', 3, "hooks.before: unknown hook"),
        ('driver = "x"\nhistory_size = -1\n', 2, "history_size: must be a whole number"),
        ('driver = "x"\nhistory_size = true\n', 2, "history_size: must be a whole number"),
        ("driver = 3\n", 1, "driver: must be a string, not int"),
        ('driver = "x"\nmodel = "use::"\n', 2, "model: 'use::' must name a role"),
        ('driver = "x"\n\nworkdir = "somewhere"\n', 3, "workdir: policy must be one of"),
        ('driver = "x"\n[workdir]\npolicy = "fixed"\n', 2, "workdir: policy 'fixed' needs a path"),
        (
            'driver = "x"\n[workdir]\npolicy = "per-topic"\npath = "/tmp"\n',
            4,
            "workdir.path: a path is only used by policy 'fixed'",
        ),
        ('driver = "x"\noptions = 3\n', 2, "options: must be a table"),
    ],
)
def test_semantic_errors_point_at_the_key_line(text: str, line: int, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_assistant("a", text, "/cfg/assistants/a.toml")
    assert info.value.message.startswith(f"/cfg/assistants/a.toml:{line}: {message}")
    assert info.value.details["line"] == line


def test_bad_file_does_not_hide_good_ones(tmp_path: Path) -> None:
    folder = tmp_path / "assistants"
    write(folder, "good.toml", 'driver = "scripted"\n')
    write(folder, "bad.toml", "driver = [\n")
    write(folder, "notes.txt", "ignored")
    catalog = load_assistants(tmp_path)
    assert list(catalog.assistants) == ["good"]
    assert len(catalog.errors) == 1 and "bad.toml:" in catalog.errors[0].message
    assert catalog.get("good").driver == "scripted"


def test_unknown_and_default_assistant(tmp_path: Path) -> None:
    catalog = load_assistants(tmp_path)  # no assistants dir at all
    assert catalog.get("") == default_assistant()
    assert catalog.get("default") == default_assistant()
    with pytest.raises(ConfigError, match=r"^no assistant named 'nope' \(known: none\)"):
        catalog.get("nope")


def test_a_default_file_overrides_the_builtin(tmp_path: Path) -> None:
    write(tmp_path / "assistants", "default.toml", 'driver = "scripted"\n')
    assert load_assistants(tmp_path).get("").driver == "scripted"


def test_bad_assistant_name(tmp_path: Path) -> None:
    write(tmp_path / "assistants", "-x.toml", 'driver = "a"\n')
    assert "must be letters" in load_assistants(tmp_path).errors[0].message


def test_roles_file(tmp_path: Path) -> None:
    write(
        tmp_path,
        "roles.toml",
        """\
[system]
default = { driver = "claude-code", model = "sonnet" }
coding = { driver = "claude-code", model = "opus" }

[profiles.work]
default = { driver = "openai", model = "gpt" }
fast = { model = "mini" }
""",
    )
    roles = load_roles(tmp_path)
    assert roles.system["coding"] == RoleTarget("claude-code", "opus")
    assert roles.profiles["work"]["fast"] == RoleTarget("", "mini")
    assert load_roles(tmp_path / "missing").system == {}


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ('[system]\ndefault = "claude"\n', 2, "system.default: must be a table"),
        ("[system]\ncoding = {}\n", 2, "system.coding: needs a driver, a model, or both"),
        ('[system]\nx = { model = "use::y" }\n', 2, "system.x.model: a role cannot point"),
        ('[profiles.work]\nx = { drive = "a" }\n', 2, "profiles.work.x.drive: unknown key"),
        ("teams = {}\n", 1, "teams: unknown key"),
    ],
)
def test_roles_errors_point_at_the_line(text: str, line: int, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_roles(text, "/cfg/roles.toml")
    assert info.value.message.startswith(f"/cfg/roles.toml:{line}: {message}")


def test_key_line_finds_nested_and_dotted_keys() -> None:
    text = 'a = 1\n[t]\nb = 2\n"c.d" = 3\n[u.v]\nw.x = 4\n'
    assert key_line(text, ["a"]) == 1
    assert key_line(text, ["t", "b"]) == 3
    assert key_line(text, ["t", "c.d"]) == 4
    assert key_line(text, ["u", "v", "w", "x"]) == 6
    assert key_line(text, ["t", "missing"]) == 2  # falls back to its table
    assert key_line(text, ["nowhere"]) == 1


# --- `hostd assistants` -------------------------------------------------------------------------


def cli(config: Path, *extra: str) -> tuple[int, str]:
    from rich.console import Console

    from hostd.cli import assistants_cmd
    from hostd.cli.main import build_parser

    parser, handlers = build_parser()
    args = parser.parse_args(["assistants", "--config-dir", str(config), *extra])
    assert handlers["assistants"] is assistants_cmd.run
    console = Console(record=True, width=200, color_system=None)
    code = assistants_cmd.run(args, console)
    return code, console.export_text()


def test_cli_lists_assistants_and_resolved_roles(tmp_path: Path) -> None:
    write(tmp_path / "assistants", "coder.toml", GOOD)
    write(tmp_path / "assistants", "plain.toml", 'driver = "scripted"\ndescription = "Plain"\n')
    write(tmp_path, "roles.toml", '[system]\ncoding = { driver = "claude-code", model = "opus" }\n')
    code, out = cli(tmp_path)
    assert code == 0
    assert "claude-code / opus (use::coding via system)" in out
    assert "scripted / (default)" in out and "Plain" in out
    assert "create=my_hooks:on_create, next=my_hooks.sub:on_next" in out


def test_cli_reports_bad_files_with_line_and_fails(tmp_path: Path) -> None:
    write(tmp_path / "assistants", "good.toml", 'model = "use::nothing"\n')
    bad = write(tmp_path / "assistants", "bad.toml", 'driver = "x"\n\n[hooks]\nnext = "x"\n')
    code, out = cli(tmp_path, "--profile", "work")
    assert code == 1
    assert f"error: {bad}:4: hooks.next: must be 'module:function', got 'x'" in out
    assert "cannot resolve model 'use::nothing' for profile 'work'" in out


def test_cli_without_assistants(tmp_path: Path) -> None:
    code, out = cli(tmp_path)
    assert code == 0 and "no assistants yet" in out
    # A topic that names nothing: the built-in `default`, what it would run on (or why
    # nothing can).
    assert "default (built-in)" in out
    assert "topics without --assistant" in out
    (tmp_path / "roles.toml").write_text('[system]\ndefault = { driver = "scripted" }\n')
    code, out = cli(tmp_path)
    assert "scripted / (default) (default role)" in out
    # A file named `default` replaces the built-in one: listed once, as the file says.
    write(tmp_path / "assistants", "default.toml", 'driver = "scripted"\ndescription = "Mine"\n')
    code, out = cli(tmp_path)
    assert "(built-in)" not in out and "Mine" in out


def test_cli_with_only_broken_files_does_not_say_there_are_none(tmp_path: Path) -> None:
    # Found from outside: a folder whose one file was broken said "no assistants yet: add
    # TOML files" above the error naming that file.
    bad = write(tmp_path / "assistants", "bad.toml", "driver = \n")
    code, out = cli(tmp_path)
    assert code == 1
    assert "no assistants yet" not in out
    assert f"error: {bad}:1:" in out
