"""Old import path of the transcript reducer, kept for UI authors: see `hostd.core.transcript`."""

from hostd.core.rows import LiveRow, PartsBuilder
from hostd.core.transcript import Transcript
from hostd_protocol.errors import EventGap

__all__ = ["EventGap", "LiveRow", "PartsBuilder", "Transcript"]
