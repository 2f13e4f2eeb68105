"""What `hostd chat` has shown and what it shows next: pure bookkeeping over a transcript.

The screen has two parts. Finished rows go to the terminal's scrollback once, in history order
(so the terminal's own scrolling, search and copy work on them); the live region at the bottom
holds only what still changes: the answer being streamed, unsent messages, an approval prompt,
the status line and the input line.

Rules it guards:

- A history row is printed once, and only after every row before it was printed: a row is
  *settled* when it can no longer change (a user message in the history, a marker, an answer
  that ended); the first unsettled row and everything after it stay live.
- Unsent rows (`queued`, `draft`) never go to the scrollback: they are listed, numbered for
  `/discard N`, `/send N` and `/edit N`, in the host's order (position).
- An unsent row is a *steer* while the turn it was steered into runs; afterwards (the driver
  never took it) it is plain *queued*, which is what it then is for the host too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hostd.cli.chat_render import UNSENT, ChatView, roll_labels
from hostd_protocol.client_messages import ApprovalInfo, MessageRow, TopicInfo
from hostd_protocol.common import Usage

__all__ = ["ChatState"]

_ENDED = frozenset({"success", "error", "stopped"})


def settled(row: MessageRow) -> bool:
    """A history row that can no longer change."""
    if row.role == "assistant":
        return row.status in _ENDED
    return row.status not in UNSENT


@dataclass
class ChatState:
    """The chat screen's memory: which rows are printed, what each unsent row is."""

    printed: set[str] = field(default_factory=set)
    #: row id -> turn id it was steered into (rows this or another window steered).
    steers: dict[str, str] = field(default_factory=dict)
    #: Draft row ids already announced ("came back as drafts").
    announced_drafts: set[str] = field(default_factory=set)

    def take_settled(self, rows: Sequence[MessageRow]) -> list[MessageRow]:
        """History rows to print now (in order), marked printed."""
        out: list[MessageRow] = []
        for row in rows:
            if row.status in UNSENT:
                continue
            if row.id in self.printed:
                continue
            if not settled(row):
                break
            self.printed.add(row.id)
            out.append(row)
        return out

    def live_rows(self, rows: Sequence[MessageRow]) -> list[MessageRow]:
        """History rows not printed yet: the answer in flight and what follows it."""
        return [r for r in rows if r.status not in UNSENT and r.id not in self.printed]

    @staticmethod
    def unsent(rows: Sequence[MessageRow]) -> list[MessageRow]:
        """Queued and draft rows in the host's order; `/discard N` counts from 1 here."""
        return [r for r in rows if r.status in UNSENT]

    def kinds(self, rows: Sequence[MessageRow], active_turn_id: str) -> dict[str, str]:
        """ "steer" for rows steered into the running turn; the rest are plain queued/draft."""
        return {
            r.id: "steer"
            for r in rows
            if r.status == "queued" and active_turn_id and self.steers.get(r.id) == active_turn_id
        }

    def new_drafts(self, rows: Sequence[MessageRow]) -> list[MessageRow]:
        """Drafts not announced yet (a stop handed unsent messages back), marked announced."""
        out = [r for r in rows if r.status == "draft" and r.id not in self.announced_drafts]
        self.announced_drafts.update(r.id for r in out)
        return out

    def view(
        self,
        rows: Sequence[MessageRow],
        topic: TopicInfo,
        state: str,
        *,
        active_turn_id: str,
        approvals: list[ApprovalInfo],
        usage: Usage | None,
        input_text: str | None,
        input_cursor: int | None = None,
        hint: str = "",
        height: int = 40,
    ) -> ChatView:
        """Everything the live region shows, for `render_chat_live`."""
        unsent = self.unsent(rows)
        live = self.live_rows(rows)
        # What the answer may take: the terminal minus the status, input, queue and prompt.
        reserved = 4 + (len(unsent) + 1 if unsent else 0) + (6 if approvals else 0)
        reserved += (input_text or "").count("\n")
        return ChatView(
            topic=topic,
            state=state,
            live_rows=live,
            labels=roll_labels(rows),
            unsent=unsent,
            unsent_kinds=self.kinds(rows, active_turn_id),
            approvals=approvals,
            usage=usage,
            input_text=input_text,
            input_cursor=input_cursor,
            hint=hint,
            max_answer_lines=max(4, height - reserved),
        )
