"""Images from files for `hostd send --image` and chat's `/image`: read, typed by their first
bytes, and checked with the daemon's own limits before anything is sent.

A file has no media type of its own (its name may lie): the type is told by its signature
(`hostd_protocol.common.image_type_of`, the daemon's check too). The count and size limits
are the daemon's (`hostd.core.payload_bounds.check_attachments`), so a refusal reads the
same from either side; it comes before the request, as one line.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Sequence

from hostd.core.payload_bounds import check_attachments
from hostd_protocol.common import Attachment, image_type_of
from hostd_protocol.errors import HostdError
from hostd_protocol.limits import MAX_ATTACHMENT_BYTES

__all__ = ["ImageRefused", "read_image", "read_images", "staged_note"]

#: The most raw bytes of all images of a message (the limit is on their base64 form).
MAX_RAW_BYTES = MAX_ATTACHMENT_BYTES // 4 * 3


class ImageRefused(ValueError):
    """An image that cannot go: the one line saying why and what to do."""


def read_image(path: str) -> Attachment:
    """The image at `path` as an attachment named after the file."""
    full = os.path.expanduser(path)
    try:
        with open(full, "rb") as fh:
            data = fh.read(MAX_RAW_BYTES + 1)
    except OSError as exc:
        raise ImageRefused(f"cannot read image {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_RAW_BYTES:
        raise ImageRefused(
            f"image {path} is over {MAX_RAW_BYTES} bytes, the most one message's images may "
            f"be together ({MAX_ATTACHMENT_BYTES} as base64); send a smaller one"
        )
    media_type = image_type_of(data)
    if media_type is None:
        raise ImageRefused(
            f"{path} is not a PNG, JPEG, GIF or WebP image (told by its first bytes); "
            "send text files as the message (--file)"
        )
    return Attachment(
        media_type=media_type,
        data=base64.b64encode(data).decode("ascii"),
        name=os.path.basename(full),
    )


def read_images(paths: Sequence[str], already: Sequence[Attachment] = ()) -> list[Attachment]:
    """`already` and the images at `paths`, within the daemon's limits of one message."""
    images = [*already, *(read_image(p) for p in paths)]
    try:
        check_attachments(images)
    except HostdError as exc:
        raise ImageRefused(f"{exc.message}; send fewer or smaller images") from None
    return images


def staged_note(images: Sequence[Attachment]) -> str:
    """What chat says of the images that go with the next message."""
    if not images:
        return "no images go with the next message (/image PATH adds one)"
    listed = ", ".join(
        f"{a.name} ({a.media_type}, {len(base64.b64decode(a.data))} bytes)" for a in images
    )
    return f"with the next message: {listed} (/image clear drops them)"
