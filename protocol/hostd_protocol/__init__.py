"""hostd-protocol: the wire schemas, framing and errors shared by hostd, its clients and drivers.

Depends on msgspec only; the driver harness (`hostd_protocol.driver_harness`) and the async
face of `hostd_protocol.child_process` (how every process hostd starts is started and ended)
also need trio.
"""

from hostd_protocol.common import PROTOCOL_VERSION
from hostd_protocol.errors import HostdError
from hostd_protocol.framing import DEFAULT_MAX_FRAME_SIZE, Codec, FrameDecoder, encode_frame

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "PROTOCOL_VERSION",
    "Codec",
    "FrameDecoder",
    "HostdError",
    "__version__",
    "encode_frame",
]
