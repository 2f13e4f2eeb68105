/** One transcript row: Markdown answers, folded thinking, tool cards, status badges. */
import { scheduledBy, type Chunk, type MessageRow, type PlanChunk, type ToolCall, type ToolResult } from "hostd-client";
import type { ComponentChildren } from "preact";
import { useMemo } from "preact/hooks";

import { AttachmentChips, attachmentsOf } from "./attach";
import { CopyButton, onCodeCopy } from "./copy";
import { renderMarkdown } from "./markdown";

/** Who wrote a user row: "You" (any window), or the schedule whose run sent it. */
export function userWriter(row: MessageRow): string {
  const schedule = scheduledBy(row);
  return schedule ? `Schedule ${schedule}` : "You";
}

export function rowText(row: MessageRow): string {
  return (row.parts ?? [])
    .filter((p): p is Extract<Chunk, { type: "text" }> => p.type === "text")
    .map((p) => p.text)
    .join("");
}

function Markdown({ text, streaming }: { text: string; streaming: boolean }) {
  const html = useMemo(() => renderMarkdown(text, streaming), [text, streaming]);
  return <div class="md" onClick={onCodeCopy} dangerouslySetInnerHTML={{ __html: html }} />;
}

type ToolState = "running" | "waiting for approval" | "no result" | "error" | "done";

function ToolCard({ call, result, state }: { call: ToolCall; result?: ToolResult; state: ToolState }) {
  const input = call.input && Object.keys(call.input).length ? JSON.stringify(call.input, null, 2) : "";
  return (
    <div class={`tool tool-${state.replace(/ /g, "-")}`} role="group" aria-label={`Tool ${call.name}: ${state}`}
      data-testid="tool-card" data-state={state}>
      <div class="tool-head">
        <span class="tool-icon" aria-hidden="true">⚙</span>
        <span class="tool-name">{call.name}</span>
        <span class="tool-status">{state}</span>
      </div>
      {input && (
        <details class="tool-io">
          <summary>input</summary>
          <pre tabIndex={0}>{input}</pre>
        </details>
      )}
      {result !== undefined && (
        <details class="tool-io" open={result.is_error}>
          <summary>output</summary>
          <pre tabIndex={0}>{result.output}</pre>
        </details>
      )}
    </div>
  );
}

const PLAN_MARK = { completed: "✓", in_progress: "◐", pending: "○" } as const;
const PLAN_SAY = { completed: "done", in_progress: "in progress", pending: "to do" } as const;

/** The agent's plan as a checklist (each plan part is the whole plan at that moment; the
 * row's last one is drawn, where it stood in the answer). */
function Plan({ plan }: { plan: PlanChunk }) {
  const entries = plan.entries ?? [];
  const done = entries.filter((e) => e.status === "completed").length;
  return (
    <section class="plan" aria-label={`Plan, ${done} of ${entries.length} done`} data-testid="plan">
      <ul>
        {entries.map((e, i) => {
          const status = e.status ?? "pending";
          return (
            <li key={i} class={`plan-${status}`} data-status={status}>
              <span class="plan-mark" aria-hidden="true">{PLAN_MARK[status]}</span>
              <span class="sr-only">{PLAN_SAY[status]}: </span>
              {e.content}
              {e.priority && e.priority !== "medium" && <span class="badge">{e.priority}</span>}
            </li>
          );
        })}
      </ul>
    </section>
  );
}

/**
 * Each tool call's state. An open approval names its tool, not its call: the last call of that
 * tool still without a result is the one waiting (a driver asks right after announcing it).
 */
function toolStates(parts: readonly Chunk[], results: Map<string, ToolResult>, open: boolean, waiting: readonly string[]): Map<string, ToolState> {
  const states = new Map<string, ToolState>();
  const asks = [...waiting];
  for (let i = parts.length - 1; i >= 0; i--) {
    const p = parts[i]!;
    if (p.type !== "tool-call") continue;
    const result = results.get(p.call_id);
    let state: ToolState = result === undefined ? (open ? "running" : "no result") : result.is_error ? "error" : "done";
    const ask = state === "running" ? asks.indexOf(p.name) : -1;
    if (ask >= 0) {
      asks.splice(ask, 1);
      state = "waiting for approval";
    }
    states.set(p.call_id, state);
  }
  return states;
}

function AssistantParts({ row, waiting }: { row: MessageRow; waiting: readonly string[] }) {
  const parts = row.parts ?? [];
  const results = new Map<string, ToolResult>();
  for (const p of parts) if (p.type === "tool-result") results.set(p.call_id, p);
  const open = row.status === "pending";
  const states = toolStates(parts, results, open, waiting);
  let lastPlan = -1;
  parts.forEach((p, i) => {
    if (p.type === "plan") lastPlan = i;
  });
  return (
    <>
      {parts.map((p, i) => {
        switch (p.type) {
          case "text":
            return <Markdown key={i} text={p.text} streaming={open} />;
          case "thinking":
            return (
              <details key={i} class="thinking">
                <summary>Thinking</summary>
                <div class="thinking-text">{p.text}</div>
              </details>
            );
          case "tool-call":
            return <ToolCard key={i} call={p} result={results.get(p.call_id)} state={states.get(p.call_id)!} />;
          case "plan":
            return i === lastPlan ? <Plan key={i} plan={p} /> : null;
          default:
            return null; // tool results are drawn inside their call's card
        }
      })}
    </>
  );
}

/** When a row was written: the time today, else the date too; the full date as tooltip. */
export function Stamp({ at }: { at?: number }) {
  if (!at) return null;
  const d = new Date(at * 1000);
  const today = d.toDateString() === new Date().toDateString();
  const short = today
    ? d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
    : d.toLocaleString([], { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
  return <time class="stamp" dateTime={d.toISOString()} title={d.toLocaleString()}>{short}</time>;
}

/** Buttons a row shows under its head (rewind here, fork, edit), or null. */
export type RowActions = (row: MessageRow) => ComponentChildren;

export interface RowProps {
  row: MessageRow;
  label: string;
  actions?: RowActions;
  /** Superseded (shown greyed, without actions). */
  removed?: boolean;
  /** Who wrote it, shown instead of "Assistant" (the answers of a multi-answer turn). */
  who?: string;
  /** More in the head (an answer's marks and its "continue from this answer"). */
  extra?: ComponentChildren;
  /** Drawn dimmed: an answer the conversation does not continue from. */
  dim?: boolean;
  /** Tools whose open approvals this row's answer waits on (by tool name). */
  waiting?: readonly string[];
}

const NONE: readonly string[] = [];

export function Row({ row, label, actions, removed = false, who, extra, dim = false, waiting = NONE }: RowProps) {
  if (row.role === "marker") {
    const a = row.anchor;
    return (
      <article class="row marker" data-testid="marker" aria-label="Context compacted">
        Context compacted
        {a ? ` (${a.tokens_before ?? 0} → ${a.tokens_after ?? 0} tokens)` : ""}
      </article>
    );
  }
  const text = rowText(row);
  const writer = row.role === "user" ? userWriter(row) : (who ?? "Assistant");
  return (
    <article
      aria-label={`${label ? `${label}, ` : ""}${writer}${removed ? ", removed" : ""}`}
      class={`row ${row.role} status-${row.status}${removed ? " superseded" : ""}${dim ? " alternative" : ""}`}
      data-testid={removed ? "removed-row" : "row"}
      data-id={row.id}
      data-role={row.role}
      data-status={row.status}
      data-label={label}
      data-text={text}
      data-lane={row.target ? String(row.lane ?? 0) : undefined}
      data-alternative={row.target ? String(row.alternative ?? false) : undefined}
    >
      <div class="row-head">
        <span class="label">{label}</span>
        <span class="who">{writer}</span>
        {row.status === "pending" && <span class="badge live">streaming</span>}
        {row.status === "stopped" && <span class="badge">stopped</span>}
        {row.status === "error" && <span class="badge err">error</span>}
        {removed && <span class="badge">removed</span>}
        <Stamp at={row.created_at} />
        {extra}
        <span class="row-tools">
          {text && <CopyButton text={() => rowText(row)} what={`${label || "message"}`} />}
          {!removed && actions?.(row)}
        </span>
      </div>
      {row.role === "user" ? <div class="user-text">{text}</div> : <AssistantParts row={row} waiting={waiting} />}
      {row.role === "user" && <AttachmentChips images={attachmentsOf(row.meta)} />}
      {row.error && <div class="row-error">{row.error}</div>}
    </article>
  );
}
