"""Several answers to one message in `hostd chat` (pure: no I/O, easy to test).

- `/also TARGET ...` sets who else answers the messages typed from now on (`DRIVER`,
  `DRIVER/MODEL`, `/MODEL`, `@ASSISTANT`, as `hostd send --also`); `/also` alone: only the
  topic's driver again.
- `/choose N` continues the conversation from answer N (its lane number, as labelled) of the
  latest message that got several answers; `/stop N` stops answer N alone while they run.
- Answer rows are labelled `[answer N: driver/model]`; alternatives (answers not chosen) are
  drawn dim (`hostd.cli.chat_render`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from hostd.cli.answers_cmd import parse_target, target_label
from hostd_protocol.client_messages import MessageRow
from hostd_protocol.common import AnswerTarget

__all__ = ["also_note", "choose_row", "parse_also", "unknown_target"]


def parse_also(arg: str) -> list[AnswerTarget] | str:
    """The targets `/also` names, or an error text."""
    targets: list[AnswerTarget] = []
    for word in arg.split():
        try:
            targets.append(parse_target(word))
        except argparse.ArgumentTypeError as exc:
            return str(exc)
    return targets


def unknown_target(
    targets: Sequence[AnswerTarget], drivers: Sequence[str], assistants: Sequence[str]
) -> str | None:
    """Why `/also` cannot take `targets` (a driver or assistant name the daemon does not
    know: most likely a typo, which would refuse every later message), or None."""
    import difflib

    for t in targets:
        if t.driver and t.driver not in drivers:
            close = difflib.get_close_matches(t.driver, list(drivers), n=1)
            hint = f"did you mean {close[0]!r}?; " if close else ""
            return (f"no driver named {t.driver!r} ({hint}installed: {', '.join(drivers)}); "
                    "/also is unchanged")
        if t.assistant and t.assistant not in assistants:
            return (f"no assistant named {t.assistant!r} (known: {', '.join(assistants)}; "
                    "`hostd assistants` lists them); /also is unchanged")
    return None


def also_note(targets: Sequence[AnswerTarget]) -> str:
    if not targets:
        return "messages are answered by the topic's driver only"
    names = ", ".join(target_label(t) for t in targets)
    return f"messages are also answered by {names} (/choose N picks the answer to go on from)"


def choose_row(rows: Sequence[MessageRow], arg: str) -> MessageRow | str:
    """Answer `arg` (a lane number) of the latest multi-answer turn, or an error text."""
    answers = [r for r in rows if r.role == "assistant" and r.target is not None]
    if not answers:
        return "no message has several answers yet (/also DRIVER[/MODEL] asks for them)"
    turn = answers[-1].turn_id
    lanes = {r.lane: r for r in answers if r.turn_id == turn}
    try:
        n = int(arg)
    except ValueError:
        return f"which answer? give its number ({', '.join(map(str, sorted(lanes)))})"
    row = lanes.get(n)
    if row is None:
        return f"no answer {n} (answers: {', '.join(map(str, sorted(lanes)))})"
    return row
