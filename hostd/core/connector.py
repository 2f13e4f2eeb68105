"""Connector resolution: which driver and model a turn runs on. Pure.

Rules this module guards (pipeline step 6):

- An explicit driver/model wins: the topic's own choice, else the assistant's.
- A model written `use::<role>` is a role reference, resolved through `roles.toml` in this
  order: the request profile's role, the system role, the profile's `default` role, the
  system `default` role. The first tier that defines the role wins.
- When no tier resolves it, `UnresolvedRole` names every tier tried (Yao falls through
  silently and leaves the user guessing which file to edit).
- A role may give only a model; the driver then comes from the explicit driver. Having no
  driver at all after resolution is an error too, also naming where it looked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePath
from typing import Literal

import msgspec

from hostd.core.assistants import (
    DEFAULT_ASSISTANT_NAME,
    ROLE_PREFIX,
    AssistantCatalog,
    AssistantConfig,
    RolesConfig,
    RoleTarget,
    default_assistant,
)
from hostd_protocol.client_messages import AssistantInfo, DriverInfo
from hostd_protocol.errors import ConfigError, HostdError, UnresolvedRole

Tier = Literal["explicit", "profile", "system", "profile-default", "system-default"]


@dataclass(frozen=True)
class Connector:
    """The resolved driver and model, and how they were found (shown in logs and errors)."""

    driver: str
    model: str
    #: Which tier decided: "explicit", or the role tier that resolved `use::<role>`.
    tier: Tier = "explicit"
    #: The role that was asked for ("" when the model was explicit).
    role: str = ""


def role_of(model: str) -> str | None:
    """The role name of a `use::<role>` model, else None."""
    return model[len(ROLE_PREFIX) :] if model.startswith(ROLE_PREFIX) else None


def resolve_role(role: str, roles: RolesConfig, profile: str = "") -> tuple[RoleTarget, Tier]:
    """Resolve one role through the four tiers; raises `UnresolvedRole` naming all of them."""
    profile_roles = roles.profiles.get(profile, {}) if profile else {}
    tiers: list[tuple[Tier, str, RoleTarget | None]] = []
    if profile:
        tiers.append(("profile", f"profiles.{profile}.{role}", profile_roles.get(role)))
    tiers.append(("system", f"system.{role}", roles.system.get(role)))
    if role != "default":
        if profile:
            tiers.append(
                ("profile-default", f"profiles.{profile}.default", profile_roles.get("default"))
            )
        tiers.append(("system-default", "system.default", roles.system.get("default")))
    for tier, _where, target in tiers:
        if target is not None:
            return target, tier
    tried = ", ".join(where for _tier, where, _target in tiers)
    source = roles.source or "roles.toml"
    raise UnresolvedRole(
        f"cannot resolve model 'use::{role}'"
        + (f" for profile {profile!r}" if profile else "")
        + f": none of {tried} is defined in {source}; define one of them, or give the "
        f"assistant or topic an explicit driver and model",
        details={
            "role": role,
            "profile": profile,
            "tried": [w for _t, w, _x in tiers],
            "file": source,
        },
    )


def resolve_connector(
    assistant: AssistantConfig,
    roles: RolesConfig,
    *,
    profile: str = "",
    topic_driver: str = "",
    topic_model: str = "",
) -> Connector:
    """The driver and model for a turn of `assistant` in a topic.

    `topic_driver` / `topic_model` are the topic's explicit choices (they beat the
    assistant's). Raises `UnresolvedRole` when a role cannot be resolved or no driver is named.
    """
    if topic_driver:
        # The topic picked its driver: the assistant's model applies only if it is a plain
        # model meant for that same driver (a role could resolve to another driver's model).
        same = assistant.driver in ("", topic_driver) and role_of(assistant.model) is None
        model = topic_model or (assistant.model if same else "")
        if role_of(model) is None:
            return Connector(driver=topic_driver, model=model, tier="explicit")
        driver = topic_driver
    else:
        driver = assistant.driver
        model = topic_model or assistant.model
    role = role_of(model)
    if role is None:
        if not driver:
            # No model and no driver anywhere: fall back to the `default` role, so a bare
            # topic works with just a roles file.
            role = "default"
        else:
            return Connector(driver=driver, model=model, tier="explicit")
    target, tier = resolve_role(role, roles, profile)
    resolved_driver = target.driver or driver
    if not resolved_driver:
        source = roles.source or "roles.toml"
        raise UnresolvedRole(
            f"model 'use::{role}' resolved to model {target.model!r} ({tier} tier of {source}) "
            f'but no driver is named: add driver = "..." to that role or to assistant '
            f"{assistant.name!r}",
            details={"role": role, "profile": profile, "tier": tier, "file": source},
        )
    return Connector(driver=resolved_driver, model=target.model, tier=tier, role=role)


def describe_assistants(
    catalog: AssistantCatalog,
    roles: RolesConfig | ConfigError,
    drivers: Mapping[str, DriverInfo],
    profile: str = "",
    *,
    fallback: str | HostdError | None = None,
    fallback_first: bool = False,
) -> list[AssistantInfo]:
    """What `list-assistants` answers: every assistant file, sorted by name, with the driver
    and model `resolve_connector` gives it and whether that driver (from `drivers`, the
    registry's infos by name) can answer. A broken file, a role that does not resolve, a
    broken roles.toml or an unavailable driver is that assistant's one-line `error`; options,
    prompt and hooks are left out (an option value could be a secret).

    Unless a file named `default` exists (or failed to load), the built-in `default` is
    listed too (`builtin`): on the `default` role when roles.toml has one, else on
    `fallback`, the driver the daemon picks for a topic that names nothing (or why it cannot
    pick one; None: not known, the entry then says the role is missing). `fallback_first`:
    the daemon has a default driver of its own, which beats the role (model: the driver's
    default)."""
    infos: list[AssistantInfo] = []
    if not has_file(catalog, DEFAULT_ASSISTANT_NAME):
        infos.append(_builtin_default(roles, drivers, profile, fallback, fallback_first))
    for name, cfg in catalog.assistants.items():
        try:
            conn = resolve_connector(
                cfg, roles if isinstance(roles, RolesConfig) else RolesConfig(), profile=profile
            )
        except UnresolvedRole as exc:
            # With roles.toml broken, its error is the one to fix, not "role not defined".
            error = roles.message if isinstance(roles, ConfigError) else exc.message
            infos.append(AssistantInfo(name=name, description=cfg.description, error=error))
            continue
        driver = drivers.get(conn.driver)
        if driver is None:
            known = ", ".join(sorted(drivers)) or "none"
            reason = f"no driver named {conn.driver!r} is installed (installed: {known})"
        else:
            reason = "" if driver.available else f"driver {conn.driver!r}: {driver.reason}"
        infos.append(
            AssistantInfo(
                name=name,
                description=cfg.description,
                driver=conn.driver,
                model=conn.model,
                role=conn.role,
                available=driver is not None and driver.available,
                error=reason,
            )
        )
    for err in catalog.errors:
        # Every parse error names its assistant; a file that could not be read, its path.
        name = str(err.details.get("assistant") or PurePath(str(err.details.get("file"))).stem)
        infos.append(AssistantInfo(name=name, error=err.message.splitlines()[0]))
    return sorted(infos, key=lambda info: info.name)


def has_file(catalog: AssistantCatalog, name: str) -> bool:
    """Whether assistant `name` comes from a file (loaded or broken), not built in."""
    return name in catalog.assistants or any(
        err.details.get("assistant") == name for err in catalog.errors
    )


def _builtin_default(
    roles: RolesConfig | ConfigError,
    drivers: Mapping[str, DriverInfo],
    profile: str,
    fallback: str | HostdError | None,
    fallback_first: bool,
) -> AssistantInfo:
    """The built-in `default` as `describe_assistants` lists it."""
    description = "built-in: the assistant of a topic that names none"
    base = AssistantInfo(name=DEFAULT_ASSISTANT_NAME, description=description, builtin=True)
    if fallback_first and isinstance(fallback, str) and fallback:
        return _on_driver(base, drivers, fallback, "", "")
    if isinstance(roles, ConfigError):
        return msgspec.structs.replace(base, error=roles.message)
    try:
        conn = resolve_connector(default_assistant(), roles, profile=profile)
    except UnresolvedRole as exc:
        if isinstance(fallback, HostdError):
            return msgspec.structs.replace(base, error=fallback.message)
        if not fallback:
            return msgspec.structs.replace(base, error=exc.message)
        driver, model, role = fallback, "", ""
    else:
        driver, model, role = conn.driver, conn.model, conn.role
    return _on_driver(base, drivers, driver, model, role)


def _on_driver(
    base: AssistantInfo, drivers: Mapping[str, DriverInfo], driver: str, model: str, role: str
) -> AssistantInfo:
    info = drivers.get(driver)
    reason = "" if info is not None and info.available else (
        f"driver {driver!r}: {info.reason}" if info is not None
        else f"no driver named {driver!r} is installed"
    )
    return msgspec.structs.replace(
        base,
        driver=driver,
        model=model,
        role=role,
        available=info is not None and info.available,
        error=reason,
    )
