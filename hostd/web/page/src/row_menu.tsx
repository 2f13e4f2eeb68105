/**
 * The per-message menu (shown on hover or focus of a row) and the "removed messages" switch.
 *
 * - Fork from here, rewind to here: any finished history row, while no turn runs.
 * - Edit and resend: user rows, while no turn runs (the daemon supersedes what followed).
 * - Regenerate: the last answer only; while it streams this stops it first (`stop: true`).
 * Rows superseded by these stay in the store; the switch shows them greyed in place.
 */
import type { MessageRow } from "hostd-client";
import { askText } from "./dialogs";

import type { Session, ViewState } from "./session";
import { type RowActions, rowText } from "./transcript_view";

/** The id of the answer "regenerate" replaces: the last assistant row of the history. */
function lastAnswerId(rows: readonly MessageRow[]): string {
  const history = rows.filter((r) => r.status !== "queued" && r.status !== "draft" && r.role !== "marker");
  const last = history[history.length - 1];
  return last !== undefined && last.role === "assistant" ? last.id : "";
}

export function rowActions(session: Session, s: ViewState): RowActions {
  const idle = s.topicState === "idle" && s.activeTurnId === "";
  const topicId = s.topicId;
  const lastAnswer = lastAnswerId(s.rows);
  return (row) => {
    const regenerate = row.id === lastAnswer;
    if (!regenerate && (!idle || row.status === "pending")) return null;
    const fork = async () => {
      const topic = await session.act((c) => c.forkTopic(topicId, row.id));
      if (topic !== undefined) window.location.hash = `topic=${topic.id}`;
    };
    const edit = async () => {
      const text = await askText({ title: "Edit and resend", label: "Message", initial: rowText(row), submit: "Send again", multiline: true });
      if (text !== null) void session.act((c) => c.editResend(topicId, row.id, text));
    };
    const finished = idle && row.status !== "pending";
    return (
      <span class="row-actions" data-testid="row-menu">
        {finished && (
          <>
            <button class="ghost small" data-testid="rewind" title="Remove every message after this one"
              onClick={() => void session.act((c) => c.rewind(topicId, row.id))}>
              Rewind here
            </button>
            <button class="ghost small" data-testid="fork" title="A new topic with the history up to here"
              onClick={() => void fork()}>
              Fork
            </button>
          </>
        )}
        {finished && row.role === "user" && (
          <button class="ghost small" data-testid="edit-resend" title="Edit this message and send it again"
            onClick={() => void edit()}>
            Edit
          </button>
        )}
        {regenerate && (
          <button class="ghost small" data-testid="regenerate"
            title={idle ? "Answer the last message again" : "Stop this answer and answer the last message again"}
            onClick={() => void session.act((c) => c.regenerate(topicId, { stop: !idle }))}>
            Regenerate
          </button>
        )}
      </span>
    );
  };
}

/** "Show removed": the rows rewinds superseded, read with `history` `all`. */
export function RemovedSwitch({ session, s }: { session: Session; s: ViewState }) {
  const on = s.removed !== null;
  return (
    <label class="removed-switch" title="Messages a rewind, regenerate or edit replaced (kept in the store)">
      <input type="checkbox" data-testid="show-removed" checked={on}
        onChange={(e) => void session.showRemoved((e.target as HTMLInputElement).checked)} />
      show removed{on ? ` (${s.removed!.length})` : ""}
    </label>
  );
}
