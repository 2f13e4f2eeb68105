"""The app's parts without a display: the bridge's connection over a real socket pair, the
window geometry file, the single-instance hand-over."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

import msgspec
import pytest

from hostd.app import instance, state
from hostd.app.bridge import DaemonConnection, WindowApi
from hostd.app.instance import become_or_hand_over
from hostd.client.sync_wire import DaemonNotRunning
from hostd.shell.paths import Paths
from hostd_protocol.framing import encode_frame


class Page:
    """Records what the bridge evaluates in the page."""

    def __init__(self) -> None:
        self.scripts: list[str] = []
        self.closed = threading.Event()

    def run_js(self, script: str) -> None:
        self.scripts.append(script)
        if ".closed(" in script:
            self.closed.set()


def pair(page: Page) -> tuple[DaemonConnection, socket.socket]:
    ours, daemon_side = socket.socketpair()
    conn = DaemonConnection(7, ours, page.run_js, 1 << 20)
    conn.start()
    return conn, daemon_side


def test_frames_reach_the_page_in_order_and_the_end_is_told() -> None:
    page = Page()
    _conn, daemon_side = pair(page)
    bodies = [json.dumps({"type": "event", "n": i, "text": "é\u2028"}).encode() for i in range(50)]
    daemon_side.sendall(b"".join(encode_frame(b) for b in bodies))
    daemon_side.close()
    assert page.closed.wait(10)
    delivered = []
    for script in page.scripts[:-1]:
        args = script.split(".frames(7,", 1)[1].rsplit(")", 1)[0]
        delivered += json.loads(args)
    assert delivered == [b.decode() for b in bodies]
    assert "the daemon closed the connection" in page.scripts[-1]


def test_a_frame_goes_to_the_daemon_with_its_length_prefix() -> None:
    page = Page()
    conn, daemon_side = pair(page)
    conn.send('{"type":"hello"}')
    assert daemon_side.recv(100) == encode_frame(b'{"type":"hello"}')
    with pytest.raises(ValueError, match="JSON object"):
        conn.send("\x83msgpack")  # the daemon would switch the connection to msgpack
    conn.close()
    daemon_side.close()


def test_a_refusal_in_msgpack_is_told_to_the_page_in_words() -> None:
    page = Page()
    _conn, daemon_side = pair(page)
    refusal = msgspec.msgpack.encode({"type": "error", "code": "too_many_connections", "message": "64 connections already"})
    daemon_side.sendall(encode_frame(refusal))
    assert page.closed.wait(10)
    assert "the daemon refused the connection: 64 connections already" in page.scripts[-1]
    daemon_side.close()


def test_connect_without_a_daemon_says_how_to_start_it(tmp_path: Path) -> None:
    paths = Paths.under(tmp_path)
    paths.ensure()
    api = WindowApi(paths, open_window=lambda t: None, notify=lambda t, b: None)
    api._bind(Page().run_js)
    with pytest.raises(DaemonNotRunning, match="hostd serve"):
        api.connect()


def test_geometry_is_kept_and_a_bad_file_is_the_default(tmp_path: Path) -> None:
    path = tmp_path / "app-window.json"
    assert state.load(path) == state.Geometry()
    state.save(path, state.Geometry(900, 700, 120, 90))
    g = state.load(path)
    assert g == state.Geometry(900, 700, 120, 90)
    assert g.cascaded(2) == state.Geometry(900, 700, 184, 154)
    path.write_text("{not json")
    assert state.load(path) == state.Geometry()
    path.write_text(json.dumps({"width": 10, "height": 10}))
    assert state.load(path) == state.Geometry(*state.MIN_SIZE)


def test_a_second_start_hands_its_topic_to_the_first(tmp_path: Path) -> None:
    first = become_or_hand_over(tmp_path, "")
    assert first is not None
    opened: list[str] = []
    got = threading.Event()
    first.serve(lambda topic: (opened.append(topic), got.set()))
    try:
        assert (tmp_path / "app.sock").stat().st_mode & 0o777 == 0o600
        assert become_or_hand_over(tmp_path, "tp123") is None  # handed over
        assert got.wait(10)
        assert opened == ["tp123"]
    finally:
        first.close()
    again = become_or_hand_over(tmp_path, "")  # the lock is free again
    assert again is not None
    again.close()


def test_a_second_start_waits_for_a_first_one_still_starting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = become_or_hand_over(tmp_path, "")
    assert first is not None  # holds the lock, does not serve yet (Qt still starting)
    refused = threading.Event()
    send = instance._send

    def watched(*args: Any) -> None:
        try:
            send(*args)
        except FileNotFoundError:
            refused.set()
            raise

    monkeypatch.setattr(instance, "_send", watched)
    opened: list[str] = []
    handed: list[object] = []
    second = threading.Thread(target=lambda: handed.append(become_or_hand_over(tmp_path, "tp9")))
    second.start()
    try:
        assert refused.wait(10)  # it tried while nothing served, and keeps trying
        first.serve(opened.append)
        second.join(30)
        assert handed == [None] and opened == ["tp9"]
    finally:
        first.close()
