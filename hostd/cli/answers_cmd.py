"""Several answers to one message on the command line: `hostd send --also TARGET` (parsed
here), `hostd choose TOPIC ROW`, and how an answer row is labelled (history, --follow, chat).

A target is `DRIVER`, `DRIVER/MODEL` (the model may hold more slashes), `/MODEL` (the topic's
driver with another model) or `@ASSISTANT`. One-shot command: no trio, no rich at import.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from hostd_protocol.client_messages import MessageRow
from hostd_protocol.common import AnswerTarget

Handler = Callable[[argparse.Namespace], int]

COMMANDS = ("choose",)


def parse_target(text: str) -> AnswerTarget:
    """`--also` value -> target; `argparse.ArgumentTypeError` (a one-line usage error) when
    it names nobody."""
    text = text.strip()
    if text.startswith("@"):
        name = text[1:].strip()
        if not name:
            raise argparse.ArgumentTypeError("@ needs an assistant name, e.g. @reviewer")
        return AnswerTarget(assistant=name)
    driver, _, model = text.partition("/")
    driver, model = driver.strip(), model.strip()
    if not driver and not model:
        raise argparse.ArgumentTypeError(
            f"{text!r} names nobody: use DRIVER, DRIVER/MODEL, /MODEL or @ASSISTANT"
        )
    return AnswerTarget(driver=driver, model=model)


def target_label(target: AnswerTarget | None) -> str:
    """`driver/model`, `@assistant`, or `topic default` for an empty target."""
    if target is None:
        return ""
    if target.assistant:
        return f"@{target.assistant}"
    if target.driver or target.model:
        return f"{target.driver or 'topic driver'}{'/' + target.model if target.model else ''}"
    return "topic default"


def answer_label(row: MessageRow, *, mark: bool = True) -> str:
    """`answer 1: scripted/m1` (plus `, alternative` when not chosen, with `mark`); "" for a
    row that is not an answer of a multi-answer turn."""
    if row.target is None:
        return ""
    label = f"answer {row.lane}: {target_label(row.target)}"
    return f"{label}, alternative" if mark and row.alternative else label


def add_also_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--also", action="append", default=[], type=parse_target, metavar="DRIVER[/MODEL]",
        help="another model answers the same message in its own row (repeatable; /MODEL = "
        "the topic's driver with that model, @NAME = an assistant); pick the answer the "
        "conversation goes on from with `hostd choose`",
    )


def register(sub: argparse._SubParsersAction, handlers: dict[str, Handler]) -> None:  # type: ignore[type-arg]
    """Add `hostd choose` to the parser."""
    from hostd.cli.parsers import common_options

    p = sub.add_parser(
        "choose", parents=[common_options()],
        help="continue a topic from another answer of a message sent with --also",
    )
    p.add_argument("topic", help="topic id")
    p.add_argument("row", help="id of the answer to continue from (see history --ids)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    handlers["choose"] = run_choose


def run_choose(args: argparse.Namespace) -> int:
    from hostd.cli.common import out, print_json, request
    from hostd_protocol.client_messages import ChooseAnswer

    result: Any = request(args, ChooseAnswer(id=0, topic_id=args.topic, row_id=args.row))
    if isinstance(result, int):
        return result
    if getattr(args, "json", False):
        print_json({"topic_id": args.topic, "chosen": args.row})
    else:
        out().print(
            f"topic {args.topic} continues from answer {args.row}; the others are alternatives",
            markup=False,
        )
    return 0
