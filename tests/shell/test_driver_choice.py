"""Which driver a topic gets, and what is refused at `new` (issue 15, items 1 and 8): the
registry's readiness checks, the built-in default, rescanning entry points, options checked
against the driver's declared options type."""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import EntryPoint

import msgspec
import pytest

from hostd.shell.drivers import registry as registry_mod
from hostd.shell.drivers.registry import DriverRegistry
from hostd_protocol.driver_spec import CredentialStatus, DriverSpec
from hostd_protocol.errors import AuthRequired, DriverUnavailable, InvalidArgument


class EchoOptions(msgspec.Struct, frozen=True, kw_only=True):
    mode: str = "fast"
    level: int = 1


def needs_key(environ: Mapping[str, str]) -> CredentialStatus:
    if environ.get("ECHO_KEY"):
        return CredentialStatus(ok=True, summary="API key (ECHO_KEY)")
    return CredentialStatus(ok=False, summary="not logged in", fix="set ECHO_KEY")


SPEC = DriverSpec(
    name="claude-code",
    module="nowhere",
    check=f"{__name__}:needs_key",
    options_type=f"{__name__}:EchoOptions",
)
SCRIPTED = DriverSpec(name="scripted", module="nowhere")


def test_default_is_the_first_ready_preferred_driver() -> None:
    reg = DriverRegistry.from_specs(SPEC, SCRIPTED)
    assert reg.pick_default(lambda spec: {"ECHO_KEY": "k"}) == "claude-code"


def test_no_ready_default_is_refused_with_the_fix_and_the_alternatives() -> None:
    reg = DriverRegistry.from_specs(SPEC, SCRIPTED)
    with pytest.raises(AuthRequired) as info:
        reg.pick_default(lambda spec: {})
    assert info.value.message == (
        "no driver is ready for a new topic: driver 'claude-code' has no credential (not "
        "logged in): set ECHO_KEY; or pick a driver with `hostd new --driver NAME` "
        "(installed: claude-code, scripted), or set a default role in roles.toml ([system] "
        'default = { driver = "NAME", model = "MODEL" }; `hostd paths` shows the config dir)'
    )
    # The scripted (test and demo) driver is never picked silently.
    with pytest.raises(DriverUnavailable, match=r"^no driver is ready for a new topic: no dri"):
        DriverRegistry.from_specs(SCRIPTED).pick_default(lambda spec: {})


def test_credential_status_in_driver_infos() -> None:
    reg = DriverRegistry.from_specs(SPEC, SCRIPTED)
    infos = {i.name: i for i in reg.infos(lambda spec: {})}
    assert (infos["claude-code"].credential_ok, infos["claude-code"].fix) == (
        False,
        "set ECHO_KEY",
    )
    assert infos["scripted"].credential == "" and infos["scripted"].credential_ok
    broken = DriverSpec(name="x", module="nowhere", check="no_such_module:check")
    status = broken.check_credentials({})
    assert status is not None and not status.ok
    assert status.summary.startswith("credential check 'no_such_module:check' failed")


def test_options_are_checked_against_the_declared_type() -> None:
    SPEC.check_options({"mode": "slow", "level": 2})
    with pytest.raises(
        InvalidArgument,
        match=r"^unknown option 'mdoe' for driver 'claude-code' \(did you mean 'mode'\?\); "
        r"known options: level, mode \(`hostd drivers claude-code` explains them\)$",
    ):
        SPEC.check_options({"mdoe": "slow"})
    with pytest.raises(InvalidArgument, match=r"^invalid option for driver 'claude-code': "):
        SPEC.check_options({"level": "high"})



def test_a_driver_declaring_no_options_takes_none_and_help_names_are_the_known_ones() -> None:
    """Issue 36: an option for a driver that declares none was accepted and then ignored (a
    typo nobody heard of). Now it is refused; a driver that only documents its options
    (`options_help`, no type) has those names checked."""
    SCRIPTED.check_options({})
    with pytest.raises(
        InvalidArgument,
        match=r"^driver 'scripted' takes no options \(it declares none\), so 'anything', "
        r"'more' would be ignored; remove them$",
    ):
        SCRIPTED.check_options({"anything": 1, "more": 2})
    helped = DriverSpec(name="helped", module="nowhere", options_help=(("speed", "how fast"),))
    helped.check_options({"speed": "whatever"})  # names only: the driver checks the value
    with pytest.raises(
        InvalidArgument,
        match=r"^unknown option 'sped' for driver 'helped' \(did you mean 'speed'\?\); known "
        r"options: speed \(`hostd drivers helped` explains them\)$",
    ):
        helped.check_options({"sped": 1})


def test_an_unknown_name_rescans_the_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver installed while the daemon runs is found without a restart."""
    installed: list[EntryPoint] = []

    def fake_entry_points(group: str) -> list[EntryPoint]:
        return list(installed)

    monkeypatch.setattr(registry_mod, "entry_points", fake_entry_points)
    reg = DriverRegistry.discover()
    with pytest.raises(DriverUnavailable, match=r"^no driver named 'late' is installed"):
        reg.get("late")
    installed.append(
        EntryPoint(name="late", value="hostd_scripted.spec:SPEC", group="hostd.drivers")
    )
    assert reg.get("late").module == "hostd_scripted"


def test_an_unknown_name_suggests_the_close_one_and_an_install_that_works_outside_a_checkout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Found from outside: with the wheels installed (no checkout), the advice was
    # `pip install -e drivers/NAME`, and a typo got no hint.
    def fake_entry_points(group: str) -> list[EntryPoint]:
        return [EntryPoint(name="scripted", value="hostd_scripted.spec:SPEC", group=group)]

    monkeypatch.setattr(registry_mod, "entry_points", fake_entry_points)
    reg = DriverRegistry.discover()
    with pytest.raises(DriverUnavailable) as err:
        reg.get("scriptd")
    assert err.value.message == (
        "no driver named 'scriptd' is installed (did you mean 'scripted'?) (installed: "
        "scripted); a driver of another package goes into hostd's environment: `pipx inject "
        "hostd PACKAGE`, or `pip install PACKAGE` in the environment hostd runs from"
    )


def test_no_ready_default_carries_the_driver_s_own_reason_for_windows() -> None:
    """A window words the refusal in its own terms (the web page: "pick a ready driver in
    the Driver list") from `details.reason`, the driver's words without the CLI's hint."""
    reg = DriverRegistry.from_specs(SPEC, SCRIPTED)
    with pytest.raises(AuthRequired) as info:
        reg.pick_default(lambda spec: {})
    assert info.value.details["reason"] == (
        "driver 'claude-code' has no credential (not logged in): set ECHO_KEY"
    )
