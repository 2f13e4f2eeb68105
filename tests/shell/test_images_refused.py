"""A message with images to a topic whose driver takes none (`DriverSpec.images` false) is
refused with a reason, nothing stored: never a turn whose model quietly misses them."""

from __future__ import annotations

import pytest
import trio

from hostd.client import open_client
from hostd_protocol.common import Attachment
from hostd_protocol.errors import InvalidArgument
from tests.shell.conftest import Running

DOT = Attachment(media_type="image/png", data="iVBORw0KGgo=", name="dot.png")


async def test_images_to_a_driver_that_takes_none_are_refused_and_nothing_is_stored(
    running: Running,
) -> None:
    with trio.fail_after(20):
        async with open_client(running.paths) as c:
            topic = await c.create_topic(title="no eyes")  # the test registry's `fake` driver
            with pytest.raises(InvalidArgument, match=(
                r"^the fake driver of this topic takes no images \(its model would never "
                r"see them\); send the text alone$"
            )):
                await c.send(topic.id, "what is this?", "start", attachments=[DOT])
            assert (await c.history(topic.id)).rows == []
