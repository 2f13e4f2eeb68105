"""Images sent with a message (protocol 1.5): stored with the user row, handed to the driver
with the turn that answers it (also when it waited in the queue), never a steer; bounded
before anything is stored."""

from __future__ import annotations

import base64

import pytest

from hostd.core.payload_bounds import MAX_ATTACHMENTS, check_send
from hostd_protocol.common import Attachment
from hostd_protocol.errors import InvalidArgument, PayloadTooLarge
from hostd_protocol.limits import MAX_ATTACHMENT_BYTES
from tests.core.runtime_harness import Harness

PNG = Attachment(media_type="image/png", data="iVBORw0KGgo=", name="a.png")


def test_an_image_goes_with_the_turn_and_stays_with_the_row() -> None:
    h = Harness()
    result = h.send("what is this?", "start", attachments=[PNG])
    (start,) = h.starts()
    assert start.send.attachments == [PNG]
    assert h.saved(result.row_id).meta["attachments"] == [{"media_type": "image/png", "data": "iVBORw0KGgo=", "name": "a.png"}]


def test_a_message_with_images_waits_instead_of_steering_and_carries_them_when_it_starts() -> None:
    h = Harness()
    h.send("first", "start")
    with pytest.raises(InvalidArgument, match="cannot steer"):
        h.send("look", "steer", attachments=[PNG])
    queued = h.send("look at this", "auto", attachments=[PNG])
    assert queued.disposition == "queued"
    h.end()
    starts = h.starts()
    assert [s.send.text for s in starts] == ["first", "look at this"]
    assert starts[-1].send.attachments == [PNG]


def test_attachments_are_bounded_and_checked_before_storing() -> None:
    check_send("ok", [], [PNG])
    with pytest.raises(InvalidArgument, match="not valid base64"):
        check_send("ok", [], [Attachment(media_type="image/png", data="not base64!")])
    with pytest.raises(PayloadTooLarge):
        check_send("ok", [], [Attachment(media_type="image/png", data="A" * (MAX_ATTACHMENT_BYTES + 4))])
    with pytest.raises(InvalidArgument, match="at most"):
        check_send("ok", [], [PNG] * (MAX_ATTACHMENTS + 1))


def test_an_image_whose_bytes_are_not_its_declared_type_is_refused() -> None:
    # A vendor refuses a mislabelled image mid-turn; the daemon refuses it at send time.
    gif = base64.b64encode(b"GIF89a\x01\x00\x01\x00").decode()
    check_send("ok", [], [Attachment(media_type="image/gif", data=gif)])
    with pytest.raises(InvalidArgument, match=r"'a\.jpg' is sent as image/jpeg but its bytes are image/png$"):
        check_send("ok", [], [Attachment(media_type="image/jpeg", data=PNG.data, name="a.jpg")])
    text = base64.b64encode(b"just some text, not a picture").decode()
    with pytest.raises(InvalidArgument, match="bytes are not a PNG, JPEG, GIF or WebP image"):
        check_send("ok", [], [Attachment(media_type="image/png", data=text, name="a.png")])
