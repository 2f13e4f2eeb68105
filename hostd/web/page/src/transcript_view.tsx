/**
 * The transcript: rows in position order with roll labels; the answers of a multi-answer turn
 * side by side (answers.tsx); superseded rows greyed in place when asked for.
 */
import type { ApprovalInfo, MessageRow, TopicInfo } from "hostd-client";
import type { ComponentChildren } from "preact";
import { useEffect, useMemo, useRef, useState } from "preact/hooks";

import { AnswerGroup } from "./answers";
import { rollLabels } from "./labels";
import { Row, type RowActions } from "./row";

export { rowText, type RowActions } from "./row";

/** Consecutive rows, with the answer rows of one multi-answer turn (`target` set) as one group. */
function grouped(rows: readonly MessageRow[], removed: ReadonlySet<string>): Array<MessageRow | MessageRow[]> {
  const out: Array<MessageRow | MessageRow[]> = [];
  for (const row of rows) {
    const answer = !!row.target && row.role === "assistant" && !removed.has(row.id);
    const last = out[out.length - 1];
    if (answer && Array.isArray(last) && last[0]!.turn_id === row.turn_id) last.push(row);
    else out.push(answer ? [row] : row);
  }
  return out;
}

/** For each answer row, the tools its open approvals name (the turn's and lane's last pending
 * assistant row asks). */
function waitingTools(rows: readonly MessageRow[], approvals: readonly ApprovalInfo[]): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const a of approvals) {
    const row = [...rows].reverse().find((r) => r.role === "assistant" && r.status === "pending"
      && r.turn_id === a.turn_id && (r.lane ?? 0) === (a.lane ?? 0));
    if (row) out.set(row.id, [...(out.get(row.id) ?? []), a.tool]);
  }
  return out;
}

export function TranscriptView({
  rows,
  removed,
  actions,
  older,
  topic,
  choose,
  stopAnswer,
  busyTurn,
  approvals = [],
}: {
  rows: MessageRow[];
  /** Open approvals: the tool cards they wait on say so. */
  approvals?: ApprovalInfo[];
  /** The topic (names lane 0 of a multi-answer turn when its target is left empty). */
  topic?: TopicInfo;
  /** Continue from this answer (`choose-answer`), or none while that is not possible. */
  choose?: (row: MessageRow) => void;
  /** Stop one answer of the running multi-answer turn (`stop` with its row), or none. */
  stopAnswer?: (row: MessageRow) => void;
  /** The running turn's id ("" when idle): earlier turns' choices wait until it ends. */
  busyTurn?: string;
  /** "Earlier messages" button (the snapshot carried the newest rows only), or none. */
  older?: ComponentChildren;
  /** Superseded rows to show greyed in place (by position), or null. */
  removed?: MessageRow[] | null;
  actions?: RowActions;
}) {
  const history = rows.filter((r) => r.status !== "queued" && r.status !== "draft");
  const shown = removed ? [...history, ...removed].sort((a, b) => a.position - b.position) : history;
  const gone = useMemo(() => new Set((removed ?? []).map((r) => r.id)), [removed]);
  const labels = useMemo(() => rollLabels(rows), [rows]);
  const waiting = useMemo(() => waitingTools(rows, approvals), [rows, approvals]);
  // Follows the end while the reader is there; scrolled up, it stays put and offers a way back.
  const stick = useRef(true);
  const [away, setAway] = useState(false);
  const box = useRef<HTMLDivElement>(null);
  // Only the transcript scrolls: scrollIntoView would scroll the page too where the page itself
  // scrolls (a short window), pulling the composer out of view at every streamed chunk.
  const scrollToEnd = () => {
    const el = box.current;
    if (el) el.scrollTop = el.scrollHeight;
  };
  useEffect(() => {
    if (stick.current) scrollToEnd();
  }, [rows]);
  const toEnd = () => {
    stick.current = true;
    setAway(false);
    scrollToEnd();
  };
  return (
    // A `log`: a screen reader announces rows as they are added. While a turn runs the log is
    // busy: a streaming answer's Markdown is re-rendered every frame, and announcing each
    // re-render would read the answer over and over; it is read once, finished.
    <div
      class="transcript"
      role="log"
      aria-label="Transcript"
      aria-busy={busyTurn ? "true" : "false"}
      tabIndex={0}
      data-testid="transcript"
      ref={box}
      onScroll={() => {
        const el = box.current;
        if (!el) return;
        stick.current = el.scrollHeight - el.scrollTop - el.clientHeight < 40;
        if (away === stick.current) setAway(!stick.current);
      }}
    >
      {older}
      {shown.length === 0 && !older && <div class="empty">No messages yet. Type below; Enter sends.</div>}
      {grouped(shown, gone).map((item) =>
        Array.isArray(item) ? (
          <AnswerGroup
            key={item[0]!.id}
            answers={item}
            labels={labels}
            actions={actions}
            topic={topic}
            choose={choose && (!busyTurn || busyTurn === item[0]!.turn_id) ? choose : undefined}
            running={busyTurn === item[0]!.turn_id}
            stop={busyTurn === item[0]!.turn_id ? stopAnswer : undefined}
            waiting={waiting}
          />
        ) : (
          <Row key={item.id} row={item} label={labels.get(item.id) ?? ""} actions={actions} removed={gone.has(item.id)}
            waiting={waiting.get(item.id)} />
        ),
      )}
      {away && (
        <button class="to-end" data-testid="to-end" onClick={toEnd}
          aria-label={busyTurn ? "Scroll to the answer being written" : "Scroll to the latest message"}>
          ↓ {busyTurn ? "Follow the answer" : "Latest"}
        </button>
      )}
    </div>
  );
}
