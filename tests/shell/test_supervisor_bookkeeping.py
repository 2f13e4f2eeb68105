"""The supervisor's sans-IO parts: warm pool, idle timers, stderr tail, driver env, keys."""

from __future__ import annotations

import math

import pytest

from hostd.shell.drivers.session import MINIMAL_ENV, driver_env
from hostd.shell.drivers.stderr_tail import StderrTail
from hostd.shell.drivers.supervisor import SessionOptions
from hostd.shell.drivers.warm_pool import IdleTimers, WarmPool

# --- WarmPool -----------------------------------------------------------------------------------


def test_take_matches_exact_key_only() -> None:
    pool: WarmPool[str] = WarmPool(max_warm=4, ttl=10)
    assert pool.add("k1", "a", now=0) == []
    assert pool.take("k2", now=1) is None
    assert pool.take("k1", now=1) == "a"
    assert pool.take("k1", now=1) is None  # never handed out twice
    assert len(pool) == 0


def test_take_prefers_newest() -> None:
    pool: WarmPool[str] = WarmPool(max_warm=4, ttl=10)
    pool.add("k", "old", now=0)
    pool.add("k", "new", now=1)
    assert pool.take("k", now=2) == "new"
    assert pool.take("k", now=2) == "old"


def test_max_warm_evicts_oldest() -> None:
    pool: WarmPool[str] = WarmPool(max_warm=2, ttl=10)
    assert pool.add("a", "1", now=0) == []
    assert pool.add("b", "2", now=1) == []
    assert pool.add("c", "3", now=2) == ["1"]
    assert [s.item for s in pool] == ["2", "3"]


def test_max_warm_zero_disables_the_pool() -> None:
    pool: WarmPool[str] = WarmPool(max_warm=0, ttl=10)
    assert pool.add("a", "1", now=0) == ["1"]
    assert len(pool) == 0


def test_each_spare_has_its_own_ttl() -> None:
    pool: WarmPool[str] = WarmPool(max_warm=4, ttl=10)
    pool.add("a", "1", now=0)
    pool.add("b", "2", now=5)
    assert pool.next_deadline() == 10
    assert pool.expire(now=9.99) == []
    assert pool.expire(now=10) == ["1"]  # at the deadline counts as expired
    assert pool.next_deadline() == 15
    assert pool.take("b", now=15) is None  # expired spares are not handed out
    assert pool.expire(now=15) == ["2"]
    assert pool.next_deadline() is None


def test_spares_of_a_topic_can_be_dropped() -> None:
    pool: WarmPool[str] = WarmPool(max_warm=4, ttl=10)
    pool.add("k", "mine", now=0, for_topic="t1")
    pool.add("k", "generic", now=0)
    assert pool.take_for_topic("t1") == ["mine"]
    assert pool.take_for_topic("") == []
    assert [s.item for s in pool] == ["generic"]


def test_remove_and_drain() -> None:
    pool: WarmPool[str] = WarmPool(max_warm=4, ttl=10)
    pool.add("k", "x", now=0)
    pool.add("k", "y", now=0)
    assert pool.remove("x") is True
    assert pool.remove("x") is False
    assert pool.drain() == ["y"]
    assert len(pool) == 0


def test_negative_max_warm_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^max_warm must be >= 0$"):
        WarmPool(max_warm=-1, ttl=1)


# --- IdleTimers ---------------------------------------------------------------------------------


def test_opened_session_times_out_when_unused() -> None:
    timers = IdleTimers(ttl=300)
    timers.track("t", now=0)
    assert timers.next_deadline() == 300
    assert timers.due(now=299) == []
    assert timers.due(now=300) == ["t"]
    assert timers.due(now=301) == []  # handed out once


def test_turn_stops_the_timer_and_its_end_restarts_it_from_zero() -> None:
    timers = IdleTimers(ttl=300)
    timers.track("t", now=0)
    timers.turn_started("t")
    assert timers.deadline("t") is None
    assert timers.due(now=10_000) == []
    timers.turn_ended("t", now=10_000)
    assert timers.deadline("t") == 10_300


def test_pin_keeps_open_until_unpinned_and_no_turn() -> None:
    timers = IdleTimers(ttl=5)
    timers.track("t", now=0)
    timers.pin("t")
    timers.turn_started("t")
    timers.turn_ended("t", now=1)
    assert timers.deadline("t") is None  # still pinned
    timers.turn_started("t")
    timers.unpin("t", now=2)
    assert timers.deadline("t") is None  # still in a turn
    timers.turn_ended("t", now=3)
    assert timers.deadline("t") == 8


def test_unknown_topics_are_ignored_and_forget_works() -> None:
    timers = IdleTimers(ttl=5)
    timers.pin("nope")
    timers.unpin("nope", now=0)
    timers.turn_started("nope")
    timers.turn_ended("nope", now=0)
    assert "nope" not in timers
    timers.track("t", now=0)
    timers.forget("t")
    assert timers.next_deadline() is None


def test_infinite_ttl_never_fires() -> None:
    timers = IdleTimers(ttl=math.inf)
    timers.track("t", now=0)
    assert timers.next_deadline() is None
    assert timers.due(now=1e12) == []


def test_earliest_deadline_across_topics() -> None:
    timers = IdleTimers(ttl=10)
    timers.track("a", now=5)
    timers.track("b", now=1)
    assert timers.next_deadline() == 11
    assert timers.due(now=11) == ["b"]
    assert timers.next_deadline() == 15


# --- StderrTail ---------------------------------------------------------------------------------


def test_tail_splits_lines_across_reads() -> None:
    tail = StderrTail()
    assert tail.feed(b"hel") == []
    assert tail.feed(b"lo\nwor") == ["hello"]
    assert tail.close() == ["wor"]
    assert tail.text() == "hello\nwor"


def test_tail_one_byte_at_a_time() -> None:
    tail = StderrTail()
    lines = []
    for b in b"a\r\nbb\nccc\n":
        lines += tail.feed(bytes([b]))
    assert lines == ["a", "bb", "ccc"]


def test_tail_is_bounded_in_lines_and_bytes() -> None:
    tail = StderrTail(max_lines=3, max_bytes=1000)
    tail.feed(b"".join(b"line %d\n" % i for i in range(10)))
    assert tail.text() == "line 7\nline 8\nline 9"
    tail = StderrTail(max_lines=100, max_bytes=20)
    tail.feed(b"aaaaaaaaa\nbbbbbbbbb\nccccccccc\n")
    assert tail.text() == "bbbbbbbbb\nccccccccc"


def test_tail_cuts_an_endless_line() -> None:
    tail = StderrTail(max_bytes=16)
    assert tail.feed(b"x" * 40) == ["x" * 16]
    assert len(tail.text()) == 16


def test_tail_redacts_secrets_and_survives_bad_utf8() -> None:
    tail = StderrTail(redact=["sk-123", "sk-123456"])
    assert tail.feed(b"key=sk-123456 other=sk-123 \xff\n") == ["key=*** other=*** \ufffd"]


# --- driver env and keys ------------------------------------------------------------------------


def test_driver_env_is_minimal_plus_what_was_asked() -> None:
    base = {
        "PATH": "/bin",
        "HOME": "/home/u",
        "LANG": "C.UTF-8",
        "ANTHROPIC_API_KEY": "sk-daemon",
        "AWS_SECRET_ACCESS_KEY": "aws",
        "WANTED": "yes",
    }
    env = driver_env(["WANTED", "MISSING"], base, {"MY_KEY": "sk-session"})
    assert env == {
        "PATH": "/bin",
        "HOME": "/home/u",
        "LANG": "C.UTF-8",
        "WANTED": "yes",
        "MY_KEY": "sk-session",
    }
    assert set(MINIMAL_ENV).isdisjoint({"ANTHROPIC_API_KEY", "AWS_SECRET_ACCESS_KEY"})


def test_driver_env_has_a_path_even_if_the_daemon_has_none() -> None:
    assert "PATH" in driver_env([], {}, {})


def test_key_covers_options_and_a_fingerprint_of_secrets_never_the_secret() -> None:
    a = SessionOptions(driver="d", model="m", working_dir="/w", options={"x": 1, "y": 2})
    b = SessionOptions(driver="d", model="m", working_dir="/w", options={"y": 2, "x": 1})
    assert a.key() == b.key()  # option order does not matter
    assert a.key() != SessionOptions(driver="d", model="m2", working_dir="/w").key()
    assert a.key() != SessionOptions(driver="d", model="m", working_dir="/w2").key()
    s1 = SessionOptions(driver="d", secrets={"K": "sk-secret-1"})
    s2 = SessionOptions(driver="d", secrets={"K": "sk-secret-2"})
    assert s1.key() != s2.key()
    assert s1.key() != SessionOptions(driver="d").key()
    for text in (s1.key(), repr(s1), s1.secrets_fingerprint()):
        assert "sk-secret-1" not in text
