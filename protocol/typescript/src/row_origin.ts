/**
 * Who sent a user row: the user (through any window), or a schedule (docs/protocol.md,
 * "Scheduled prompts"). The same rule as Python's `hostd_protocol.client_messages.scheduled_by`.
 */
import type { MessageRow } from "./protocol.gen.js";

/** The prefix of every scheduled run's `client_msg_id`: `schedule:<schedule id>:<due>`. */
export const SCHEDULE_RUN_PREFIX = "schedule:";

/**
 * The id of the schedule whose run stored this user row, or "" for a message a window sent:
 * show such a row as the schedule's, not as "You".
 */
export function scheduledBy(row: Pick<MessageRow, "meta">): string {
  const key = row.meta?.["client_msg_id"];
  if (typeof key !== "string" || !key.startsWith(SCHEDULE_RUN_PREFIX)) return "";
  const rest = key.slice(SCHEDULE_RUN_PREFIX.length);
  const end = rest.indexOf(":");
  return end < 0 ? rest : rest.slice(0, end);
}
