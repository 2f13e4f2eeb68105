import type { MessageRow } from "hostd-client";

/**
 * Labels of history rows, the same rule as the CLI (`hostd.cli.chat_render.roll_labels`):
 * U<n> for the n-th sent user row; an assistant row is A<n> after U<n>, with an `a` when a
 * later assistant row of the same turn follows (the answer rolled at a steer boundary):
 * A1a / U2 / A2. The answers of a multi-answer turn (`target` set; never rolled: such a turn is
 * not steered) are A<n>.<lane>: A1.0 (the topic's own driver), A1.1, ..., as in the CLI and chat.
 * Queued, draft and marker rows get none.
 */
export function rollLabels(rows: readonly MessageRow[]): Map<string, string> {
  const history = rows.filter((r) => r.status !== "queued" && r.status !== "draft" && r.role !== "marker");
  const labels = new Map<string, string>();
  let userN = 0;
  history.forEach((row, i) => {
    if (row.role === "user") {
      userN += 1;
      labels.set(row.id, `U${userN}`);
      return;
    }
    if (row.target) {
      labels.set(row.id, `A${userN}.${row.lane ?? 0}`);
      return;
    }
    const cut = history
      .slice(i + 1)
      .some((later) => later.role === "assistant" && !later.target && !!later.turn_id && later.turn_id === row.turn_id);
    labels.set(row.id, `A${userN}${cut ? "a" : ""}`);
  });
  return labels;
}
