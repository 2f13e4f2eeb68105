"""One topic, three windows at once: an editor (the official ACP TypeScript SDK driving
`hostd acp`) prompts, and the Python client and the web page (real chromium) see the same
answer live while the editor's prompt runs."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio
from playwright.sync_api import Page

from hostd.client import open_client
from hostd_protocol.client_messages import RowAppended, TurnEnded
from hostd_protocol.common import TextDelta
from tests.acp_editor.editor import HERE, HOSTD, ROOT, require_sdk
from tests.web.browser import BROWSER_TEST_MARKS, WAIT_MS, WebStack, row_text, wait_rows

pytestmark = BROWSER_TEST_MARKS

TIMEOUT = WAIT_MS / 1000


class SyncEditor:
    """tests/acp_editor/editor.mjs, driven from a plain (non-trio) test."""

    def __init__(self, home: Path) -> None:
        self.proc = subprocess.Popen(
            ["node", str(HERE / "editor.mjs"), HOSTD, "--home", str(home), "acp",
             "--driver", "scripted"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=str(ROOT), text=True,
        )
        self.events: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._tags = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip():
                with self._cond:
                    self.events.append(json.loads(line))
                    self._cond.notify_all()

    def start_call(self, method: str, params: dict[str, Any]) -> str:
        self._tags += 1
        tag = f"t{self._tags}"
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(
            {"op": "call", "tag": tag, "method": method, "params": params}) + "\n")
        self.proc.stdin.flush()
        return tag

    def find(self, pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
        with self._cond:
            return next((e for e in self.events if pred(e)), None)

    def wait_for(self, pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        with self._cond:
            ok = self._cond.wait_for(lambda: any(pred(e) for e in self.events), timeout=TIMEOUT)
            assert ok, f"no such event; last ones: {self.events[-3:]}"
            return next(e for e in self.events if pred(e))

    def call(self, method: str, params: dict[str, Any]) -> Any:
        tag = self.start_call(method, params)
        got = self.wait_for(lambda e: e.get("ev") == "result" and e.get("tag") == tag)
        assert "error" not in got, got
        return got["result"]

    def text(self, sid: str) -> str:
        with self._cond:
            return "".join(
                e["params"]["update"]["content"]["text"] for e in self.events
                if e.get("ev") == "update" and e["params"]["sessionId"] == sid
                and e["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
            )

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self._reader.join(TIMEOUT)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


def watch(stack: WebStack, topic_id: str, attached: threading.Event,
          seen: list[tuple[str, bool]], editor: SyncEditor, tag: list[str]) -> None:
    """The Python client in its own thread: collect the answer's text, and for each chunk
    whether the editor's prompt was still unanswered when it arrived."""

    async def main() -> None:
        with trio.fail_after(TIMEOUT * 2):
            async with open_client(stack.paths) as client, client.attach(topic_id) as sub:
                attached.set()
                async for ev in sub:
                    if isinstance(ev, RowAppended) and isinstance(ev.chunk, TextDelta):
                        running = not tag or editor.find(
                            lambda e: e.get("ev") == "result" and e.get("tag") == tag[0]
                        ) is None
                        seen.append((ev.chunk.text, running))
                    elif isinstance(ev, TurnEnded):
                        return

    trio.run(main)


def test_an_editors_prompt_is_live_in_the_python_client_and_the_web_page(
    stack: WebStack, pages: Callable[[str], Page], tmp_path: Path
) -> None:
    require_sdk()
    editor = SyncEditor(stack.home)
    try:
        editor.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        sid = editor.call("session/new", {"cwd": str(tmp_path), "mcpServers": []})["sessionId"]
        page = pages(sid)
        attached, seen, tag = threading.Event(), [], []
        watcher = threading.Thread(
            target=watch, args=(stack, sid, attached, seen, editor, tag), daemon=True
        )
        watcher.start()
        assert attached.wait(TIMEOUT)
        tag.append(editor.start_call("session/prompt", {
            "sessionId": sid,
            "prompt": [{"type": "text", "text": "/chunks 400 size=8 rate=100\n/text END"}],
        }))
        # The page shows the answer growing while the editor still waits for its prompt.
        wait_rows(page, "rows.some(r => r.role === 'assistant' && r.status === 'pending'"
                        " && r.text.length > 80)")
        assert editor.find(lambda e: e.get("ev") == "result" and e.get("tag") == tag[0]) is None
        done = editor.wait_for(lambda e: e.get("ev") == "result" and e.get("tag") == tag[0])
        assert done["result"] == {"stopReason": "end_turn"}
        watcher.join(TIMEOUT)
        assert not watcher.is_alive()
        wait_rows(page, "rows.some(r => r.role === 'assistant' && r.status === 'success'"
                        " && r.text.endsWith('END'))")
        # All three saw the same answer, the Python client while the prompt ran.
        assert any(running for _text, running in seen)
        python_text = "".join(text for text, _running in seen)
        stored = row_text(stack.history(sid)[-1])
        assert python_text == editor.text(sid) == stored
        assert stored.endswith("END") and len(stored) == 400 * 8 + 3
    finally:
        editor.close()

