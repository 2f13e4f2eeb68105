"""Connector resolution: explicit wins; `use::<role>` through every tier; a clear error."""

from __future__ import annotations

import re

import pytest

from hostd.core.assistants import AssistantConfig, RolesConfig, RoleTarget, parse_roles
from hostd.core.connector import Connector, resolve_connector, resolve_role
from hostd_protocol.errors import ConfigError, UnresolvedRole

ROLES = RolesConfig(
    system={
        "default": RoleTarget("sys-driver", "sys-default-model"),
        "coding": RoleTarget("sys-driver", "sys-coding-model"),
    },
    profiles={
        "work": {
            "default": RoleTarget("work-driver", "work-default-model"),
            "coding": RoleTarget("work-driver", "work-coding-model"),
        },
        "home": {"default": RoleTarget("", "home-default-model")},
    },
    source="/cfg/roles.toml",
)


def coder(model: str = "use::coding", driver: str = "") -> AssistantConfig:
    return AssistantConfig(name="coder", model=model, driver=driver)


def test_explicit_assistant_driver_and_model_win() -> None:
    got = resolve_connector(coder("m1", "d1"), ROLES, profile="work")
    assert got == Connector("d1", "m1", "explicit")


def test_topic_choice_beats_the_assistant() -> None:
    got = resolve_connector(coder(), ROLES, profile="work", topic_driver="td", topic_model="tm")
    assert got == Connector("td", "tm", "explicit")


def test_tier_1_profile_role() -> None:
    got = resolve_connector(coder(), ROLES, profile="work")
    assert got == Connector("work-driver", "work-coding-model", "profile", "coding")


def test_tier_2_system_role() -> None:
    assert resolve_connector(coder(), ROLES, profile="home") == Connector(
        "sys-driver", "sys-coding-model", "system", "coding"
    )
    assert resolve_connector(coder(), ROLES).tier == "system"


def test_tier_3_profile_default() -> None:
    got = resolve_connector(coder("use::writing"), ROLES, profile="work")
    assert got == Connector("work-driver", "work-default-model", "profile-default", "writing")


def test_tier_4_system_default() -> None:
    got = resolve_connector(coder("use::writing"), ROLES, profile="nobody")
    assert got == Connector("sys-driver", "sys-default-model", "system-default", "writing")


def test_role_without_driver_takes_the_explicit_driver() -> None:
    got = resolve_connector(coder("use::default", "mine"), ROLES, profile="home")
    assert got == Connector("mine", "home-default-model", "profile", "default")


def test_role_without_any_driver_is_an_error() -> None:
    with pytest.raises(UnresolvedRole, match=r"no driver is named"):
        resolve_connector(coder("use::default"), ROLES, profile="home")


def test_nothing_at_all_uses_the_default_role() -> None:
    got = resolve_connector(AssistantConfig(name="bare"), ROLES)
    assert got == Connector("sys-driver", "sys-default-model", "system", "default")


def test_unresolved_names_every_tier_tried() -> None:
    with pytest.raises(UnresolvedRole) as info:
        resolve_role("writing", RolesConfig(source="/cfg/roles.toml"), "work")
    err = info.value
    assert err.message == (
        "cannot resolve model 'use::writing' for profile 'work': none of "
        "profiles.work.writing, system.writing, profiles.work.default, system.default is "
        "defined in /cfg/roles.toml; define one of them, or give the assistant or topic an "
        "explicit driver and model"
    )
    assert err.details["tried"] == [
        "profiles.work.writing",
        "system.writing",
        "profiles.work.default",
        "system.default",
    ]
    assert isinstance(err, ConfigError) and err.code == "unresolved_role"


def test_unresolved_default_role_without_profile() -> None:
    with pytest.raises(UnresolvedRole, match=re.escape("none of system.default is defined")):
        resolve_connector(AssistantConfig(name="bare"), RolesConfig())


def test_parsed_roles_file_resolves() -> None:
    roles = parse_roles('[system]\ndefault = { driver = "scripted" }\n')
    assert resolve_connector(AssistantConfig(name="a"), roles) == Connector(
        "scripted", "", "system", "default"
    )


def test_topic_driver_without_model_ignores_the_assistants_role() -> None:
    # The built-in default assistant is `use::default`: a topic naming its driver must not
    # need a roles file, nor get another driver's model.
    got = resolve_connector(
        AssistantConfig(name="d", model="use::default"), RolesConfig(), topic_driver="scripted"
    )
    assert got == Connector("scripted", "", "explicit")
    plain = AssistantConfig(name="p", driver="scripted", model="fast")
    assert resolve_connector(plain, ROLES, topic_driver="scripted").model == "fast"
    assert resolve_connector(plain, ROLES, topic_driver="other").model == ""
    assert resolve_connector(plain, ROLES, topic_driver="other", topic_model="use::coding") == (
        Connector("sys-driver", "sys-coding-model", "system", "coding")
    )


def test_describe_assistants_resolves_each_and_lists_errors() -> None:
    from hostd.core.assistants import AssistantCatalog
    from hostd.core.connector import describe_assistants
    from hostd_protocol.client_messages import AssistantInfo, DriverInfo

    catalog = AssistantCatalog(
        assistants={
            "coder": coder(),
            "lost": AssistantConfig(name="lost", model="use::nowhere", driver=""),
            "plain": AssistantConfig(name="plain", driver="off", options={"key": "secret"}),
        },
        errors=[ConfigError("/cfg/a/bad.toml:3: x: unknown key", details={"assistant": "bad"})],
    )
    drivers = {
        "work-driver": DriverInfo(name="work-driver", available=True),
        "off": DriverInfo(name="off", available=False, reason="no credential"),
    }
    listed = describe_assistants(catalog, ROLES, drivers, profile="work")
    assert [a.name for a in listed] == ["bad", "coder", "default", "lost", "plain"]
    assert listed[0] == AssistantInfo(name="bad", error="/cfg/a/bad.toml:3: x: unknown key")
    assert listed[1] == AssistantInfo(
        name="coder", driver="work-driver", model="work-coding-model", role="coding",
        available=True,
    )
    # The built-in `default` (no file of that name): the `default` role of the profile.
    assert listed[2] == AssistantInfo(
        name="default", description=BUILTIN, driver="work-driver", model="work-default-model",
        role="default", available=True, builtin=True,
    )
    # `use::nowhere` falls to the profile's default role (tier 3): sys-driver is not installed.
    assert listed[3].driver == "work-driver" and listed[3].available
    assert listed[4] == AssistantInfo(
        name="plain", driver="off", error="driver 'off': no credential"
    )
    broken_roles = ConfigError("/cfg/roles.toml:1: invalid TOML")
    builtin, lost = describe_assistants(catalog, broken_roles, drivers)[2:4]
    assert builtin == AssistantInfo(
        name="default", description=BUILTIN, error="/cfg/roles.toml:1: invalid TOML",
        builtin=True,
    )
    assert lost == AssistantInfo(name="lost", error="/cfg/roles.toml:1: invalid TOML")


BUILTIN = "built-in: the assistant of a topic that names none"


def test_the_builtin_default_without_a_default_role_runs_on_the_fallback() -> None:
    from hostd.core.assistants import AssistantCatalog
    from hostd.core.connector import describe_assistants
    from hostd_protocol.client_messages import AssistantInfo, DriverInfo
    from hostd_protocol.errors import DriverUnavailable

    none = AssistantCatalog(assistants={})
    drivers = {"claude-code": DriverInfo(name="claude-code", available=True)}
    assert describe_assistants(none, RolesConfig(), drivers, fallback="claude-code") == [
        AssistantInfo(
            name="default", description=BUILTIN, driver="claude-code", available=True,
            builtin=True,
        )
    ]
    cannot = DriverUnavailable("no driver is ready for a new topic: ...")
    (listed,) = describe_assistants(none, RolesConfig(), drivers, fallback=cannot)
    assert (listed.error, listed.available) == (cannot.message, False)
    # A file named `default` (even a broken one) replaces the built-in entry.
    broken = AssistantCatalog(
        assistants={}, errors=[ConfigError("x", details={"assistant": "default"})]
    )
    assert describe_assistants(broken, RolesConfig(), drivers, fallback="claude-code") == [
        AssistantInfo(name="default", error="x")
    ]
