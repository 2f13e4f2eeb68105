"""Connection slots (`hostd.core.connection_slots`): the cap, the quota of connections that
have not said hello, and who is evicted to let a newcomer in."""

from __future__ import annotations

import pytest

from hostd.core.connection_slots import Admit, ConnectionSlots, Refuse, default_max_startups


def test_a_full_quota_evicts_the_oldest_silent_connection() -> None:
    slots: ConnectionSlots[str] = ConnectionSlots(max_connections=10, max_startups=2)
    assert slots.admit("a") == Admit()
    assert slots.admit("b") == Admit()
    slots.welcome("a")  # said hello: out of the quota, never evicted
    assert slots.admit("c") == Admit()
    decision = slots.admit("d")
    assert isinstance(decision, Admit) and decision.evicted == "b"
    assert decision.reason.startswith("closed before its hello: 2 newer connections")
    assert (slots.total, slots.waiting) == (3, 2)
    slots.release("b")  # the evicted one ends later: nothing changes
    assert (slots.total, slots.waiting) == (3, 2)


def test_the_cap_evicts_a_silent_connection_and_refuses_only_for_welcomed_ones() -> None:
    slots: ConnectionSlots[int] = ConnectionSlots(max_connections=3, max_startups=3)
    for conn in (1, 2, 3):
        assert slots.admit(conn) == Admit()
    slots.welcome(1)
    slots.welcome(3)
    decision = slots.admit(4)  # full: the one silent connection (2) makes room
    assert isinstance(decision, Admit) and decision.evicted == 2
    assert "its maximum of 3 connections" in decision.reason
    slots.welcome(4)
    refused = slots.admit(5)
    assert isinstance(refused, Refuse)
    assert refused.reason.startswith("hostd already serves 3 connections, its maximum")
    slots.release(1)
    assert slots.admit(5) == Admit()


def test_welcome_and_release_of_unknown_connections_do_nothing() -> None:
    slots: ConnectionSlots[str] = ConnectionSlots(max_connections=4, max_startups=1)
    slots.welcome("ghost")
    slots.release("ghost")
    assert slots.total == 0
    assert slots.admit("a") == Admit()
    decision = slots.admit("b")
    assert isinstance(decision, Admit) and decision.evicted == "a"
    slots.welcome("a")  # evicted before its hello was read: it stays out
    assert (slots.total, slots.waiting) == (1, 1)


@pytest.mark.parametrize(("cap", "quota"), [(1, 1), (8, 2), (100, 25), (4096, 64)])
def test_default_quota(cap: int, quota: int) -> None:
    assert default_max_startups(cap) == quota


@pytest.mark.parametrize(("cap", "quota"), [(0, 1), (4, 0), (4, 5)])
def test_bad_limits_are_refused(cap: int, quota: int) -> None:
    with pytest.raises(ValueError, match=r"^max_"):
        ConnectionSlots(cap, quota)
