/**
 * The Schedules panel of a topic: its scheduled prompts (issue 21), add one, pause / resume,
 * run now, remove.
 *
 * The daemon sends no event when a schedule changes, so the list is re-read when the panel
 * opens, after each action here, when the topic's rows change (a run adds one) and every few
 * seconds while the panel is open (another window may have changed it).
 */
import type { ScheduleInfo } from "hostd-client";
import { useEffect, useState } from "preact/hooks";

import type { Session } from "./session";

const UNITS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86400 };

/** "90", "90s", "5m", "1.5h", "1d" -> seconds; NaN when it is none of those. */
export function parseInterval(text: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$/i.exec(text);
  if (!m) return NaN;
  return Number(m[1]) * UNITS[(m[2] || "s").toLowerCase()]!;
}

function every(seconds: number): string {
  for (const unit of ["d", "h", "m"]) {
    const n = seconds / UNITS[unit]!;
    if (Number.isInteger(n)) return `every ${n}${unit}`;
  }
  return `every ${seconds}s`;
}

function when(t: number | null | undefined): string {
  return t ? new Date(t * 1000).toLocaleString() : "—";
}

function ScheduleItem({ session, s, changed }: { session: Session; s: ScheduleInfo; changed: () => void }) {
  // Defaults are omitted on the wire: no `enabled` means enabled.
  const enabled = s.enabled !== false;
  const act = async (fn: Parameters<Session["call"]>[0]) => {
    await session.act(fn);
    changed();
  };
  return (
    <div class={`schedule ${enabled ? "" : "paused"}`} data-testid="schedule" data-schedule-id={s.id}
      data-enabled={String(enabled)} data-text={s.text}>
      <div class="schedule-line">
        <span class="badge" title={s.cron ? `cron, zone ${s.tz ?? "UTC"}` : "interval"}>
          {s.cron ? `${s.cron} (${s.tz ?? "UTC"})` : every(s.every_s ?? 0)}
        </span>
        <span class="schedule-text">{s.text}</span>
      </div>
      <div class="schedule-line meta">
        <span data-testid="schedule-next">{enabled ? `next ${when(s.next_due)}` : "paused"}</span>
        <span>{s.busy === "skip" ? "skips when busy" : "queues when busy"}</span>
        <span data-testid="schedule-runs">{s.runs ?? 0} {s.runs === 1 ? "run" : "runs"}</span>
        {s.last_status && <span class={`schedule-status-${s.last_status}`}>last: {s.last_status} {when(s.last_run_at)}</span>}
      </div>
      {s.last_error && <div class="schedule-error" data-testid="schedule-error">{s.last_error}</div>}
      <div class="schedule-buttons">
        <button class="ghost small" data-testid="schedule-toggle"
          onClick={() => void act((c) => c.setScheduleEnabled(s.id, !enabled))}>
          {enabled ? "Pause" : "Resume"}
        </button>
        <button class="ghost small" data-testid="schedule-run" onClick={() => void act((c) => c.runScheduleNow(s.id))}>
          Run now
        </button>
        <button class="ghost small danger" data-testid="schedule-remove"
          onClick={() => void act((c) => c.removeSchedule(s.id))}>
          Remove
        </button>
      </div>
    </div>
  );
}

function AddSchedule({ session, topicId, added }: { session: Session; topicId: string; added: () => void }) {
  const [kind, setKind] = useState<"every" | "cron">("every");
  const [when, setWhen] = useState("1h");
  const [text, setText] = useState("");
  const [busy, setBusy] = useState<"queue" | "skip">("queue");
  const submit = async (e: Event) => {
    e.preventDefault();
    if (!text.trim()) return;
    let timing: { every_s: number } | { cron: string; tz: string };
    if (kind === "every") {
      const seconds = parseInterval(when);
      if (!(seconds > 0)) {
        session.fail(new Error(`not an interval: “${when}” (say 90s, 5m, 1h or 1d)`));
        return;
      }
      timing = { every_s: seconds };
    } else {
      // Cron times are read in the browser's zone, which is what the user means by "9:00".
      timing = { cron: when.trim(), tz: Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC" };
    }
    const made = await session.act((c) => c.addSchedule(topicId, text, { ...timing, busy }));
    if (made !== undefined) {
      setText("");
      added();
    }
  };
  return (
    <form class="schedule-add" data-testid="schedule-form" onSubmit={(e) => void submit(e)}>
      <select name="kind" value={kind} onChange={(e) => {
        const k = (e.target as HTMLSelectElement).value as "every" | "cron";
        setKind(k);
        setWhen(k === "every" ? "1h" : "0 9 * * 1-5");
      }}>
        <option value="every">every</option>
        <option value="cron">cron</option>
      </select>
      <input name="when" value={when} size={12} title={kind === "every" ? "90s, 5m, 1h, 1d" : "5-field cron expression"}
        onInput={(e) => setWhen((e.target as HTMLInputElement).value)} />
      <select name="busy" value={busy} title="when the topic is answering at a due time"
        onChange={(e) => setBusy((e.target as HTMLSelectElement).value as "queue" | "skip")}>
        <option value="queue">queue if busy</option>
        <option value="skip">skip if busy</option>
      </select>
      <input name="text" class="schedule-message" placeholder="message to send" value={text}
        onInput={(e) => setText((e.target as HTMLInputElement).value)} />
      <button type="submit" class="primary small" data-testid="schedule-add">
        Add
      </button>
    </form>
  );
}

export function SchedulesPanel(
  { session, topicId, rowCount, online }: { session: Session; topicId: string; rowCount: number; online: boolean },
) {
  const [open, setOpen] = useState(false);
  const [schedules, setSchedules] = useState<ScheduleInfo[] | null>(null);
  const refresh = async () => {
    // Offline (a page just loaded, a reconnect) is the connection indicator's business, not
    // an error banner of ours: the list is read again once online.
    if (session.client === null) return;
    const list = await session.call((c) => c.listSchedules(topicId));
    if (list !== undefined) setSchedules(list);
  };
  useEffect(() => setSchedules(null), [topicId]);
  useEffect(() => {
    if (online) void refresh();
  }, [topicId, online]);
  useEffect(() => {
    if (open) void refresh();
  }, [rowCount]);
  useEffect(() => {
    if (!open) return;
    const timer = setInterval(() => void refresh(), 5000);
    return () => clearInterval(timer);
  }, [open, topicId]);
  const count = schedules?.length ?? 0;
  return (
    <details class="schedules" data-testid="schedules" open={open}
      onToggle={(e) => setOpen((e.target as HTMLDetailsElement).open)}>
      <summary data-testid="schedules-toggle">Schedules{count > 0 ? ` (${count})` : ""}</summary>
      {schedules?.map((s) => (
        <ScheduleItem key={s.id} session={session} s={s} changed={() => void refresh()} />
      ))}
      {schedules?.length === 0 && <div class="empty">No schedules on this topic.</div>}
      <AddSchedule session={session} topicId={topicId} added={() => void refresh()} />
    </details>
  );
}
