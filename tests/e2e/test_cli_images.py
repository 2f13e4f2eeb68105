"""`hostd send --image`: images from files, typed by their first bytes, checked with the
daemon's limits before anything is sent, stored as attachments like the web page's, and
refused in one line for a driver (the topic's or an extra answer's) that takes none. A real
daemon with the scripted driver (it takes images and says so) and the dev tools' `bench-load`
driver (it takes none)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from hostd_protocol.limits import MAX_ATTACHMENT_BYTES
from tests.e2e.test_cli_everyday import Hostd, hostd, one_line_error

__all__ = ["hostd"]

pytestmark = pytest.mark.e2e

#: A whole 1x1 PNG (68 bytes).
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAAC0lEQVR4nGNgYAAAAAMAASsJTYQAAAAASUVORK5CYII="
)


def rows(h: Hostd, tid: str) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = json.loads(h.ok("history", tid, "--json"))["rows"]
    return rows


def test_send_images_from_files(hostd: Hostd) -> None:
    hostd.ok("serve", "--detach")
    (hostd.project / "dot.png").write_bytes(PNG)
    # Named .jpg, but its bytes are a PNG: the bytes tell.
    (hostd.project / "photo.jpg").write_bytes(PNG)
    tid = hostd.ok("new", "--driver", "scripted", "--title", "eyes").strip()
    out = hostd.ok("send", tid, "/text a dot", "--image", "dot.png", "--image", "photo.jpg",
                   "--follow")
    assert "(images: dot.png image/png 68 bytes, photo.jpg image/png 68 bytes)" in out
    user = rows(hostd, tid)[0]
    data = base64.b64encode(PNG).decode()
    assert user["meta"]["attachments"] == [  # type: ignore[index]
        {"media_type": "image/png", "data": data, "name": "dot.png"},
        {"media_type": "image/png", "data": data, "name": "photo.jpg"},
    ]


def test_images_that_cannot_go_are_one_line_and_nothing_is_sent(
    hostd: Hostd, tmp_path: Path
) -> None:
    hostd.ok("serve", "--detach")
    (hostd.project / "dot.png").write_bytes(PNG)
    (hostd.project / "notes.png").write_text("# not a picture\n")
    (hostd.project / "big.png").write_bytes(PNG + b"\0" * MAX_ATTACHMENT_BYTES)
    half = PNG + b"\0" * (MAX_ATTACHMENT_BYTES // 2)  # each fits, two do not (as base64)
    (hostd.project / "half.png").write_bytes(half)
    tid = hostd.ok("new", "--driver", "scripted", "--title", "eyes").strip()
    err = one_line_error(hostd("send", tid, "look", "--image", "notes.png"))
    assert "notes.png is not a PNG, JPEG, GIF or WebP image (told by its first bytes)" in err
    err = one_line_error(hostd("send", tid, "look", "--image", "missing.png"))
    assert "cannot read image missing.png: No such file or directory" in err
    err = one_line_error(hostd("send", tid, "look", "--image", "big.png"))
    assert "image big.png is over" in err
    err = one_line_error(hostd("send", tid, "look", "--image", "half.png", "--image", "half.png"))
    assert f"the limit is {MAX_ATTACHMENT_BYTES}; send fewer or smaller images" in err
    err = one_line_error(hostd("send", tid, "look", *["--image", "dot.png"] * 9))
    assert "9 attachments; at most 8 go with one message" in err
    # A driver that takes none: the topic's, or an extra answer's (refused up front).
    err = one_line_error(hostd("send", tid, "look", "--image", "dot.png",
                               "--also", "bench-load"))
    assert err == (
        "hostd: extra answer 1 (bench-load): the bench-load driver takes no images (its "
        "model would never see them); nothing was sent [invalid_argument]"
    )
    assert rows(hostd, tid) == []
    blind = hostd.ok("new", "--driver", "bench-load", "--title", "blind").strip()
    err = one_line_error(hostd("send", blind, "look", "--image", "dot.png", "--follow"))
    assert "the bench-load driver of this topic takes no images" in err
    assert rows(hostd, blind) == []
