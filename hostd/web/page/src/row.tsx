/** One transcript row: Markdown answers, folded thinking, tool cards, status badges. */
import type { Chunk, MessageRow, ToolCall, ToolResult } from "hostd-client";
import type { ComponentChildren } from "preact";
import { useMemo } from "preact/hooks";

import { renderMarkdown } from "./markdown";

export function rowText(row: MessageRow): string {
  return (row.parts ?? [])
    .filter((p): p is Extract<Chunk, { type: "text" }> => p.type === "text")
    .map((p) => p.text)
    .join("");
}

function Markdown({ text, streaming }: { text: string; streaming: boolean }) {
  const html = useMemo(() => renderMarkdown(text, streaming), [text, streaming]);
  return <div class="md" dangerouslySetInnerHTML={{ __html: html }} />;
}

function ToolCard({ call, result, open }: { call: ToolCall; result?: ToolResult; open: boolean }) {
  const status = result === undefined ? (open ? "running" : "no result") : result.is_error ? "error" : "done";
  const input = call.input && Object.keys(call.input).length ? JSON.stringify(call.input, null, 2) : "";
  return (
    <div class={`tool tool-${status.replace(" ", "-")}`} data-testid="tool-card">
      <div class="tool-head">
        <span class="tool-icon">⚙</span>
        <span class="tool-name">{call.name}</span>
        <span class="tool-status">{status}</span>
      </div>
      {input && (
        <details class="tool-io">
          <summary>input</summary>
          <pre>{input}</pre>
        </details>
      )}
      {result !== undefined && (
        <details class="tool-io" open={result.is_error}>
          <summary>output</summary>
          <pre>{result.output}</pre>
        </details>
      )}
    </div>
  );
}

function AssistantParts({ row }: { row: MessageRow }) {
  const parts = row.parts ?? [];
  const results = new Map<string, ToolResult>();
  for (const p of parts) if (p.type === "tool-result") results.set(p.call_id, p);
  const open = row.status === "pending";
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
            return <ToolCard key={i} call={p} result={results.get(p.call_id)} open={open} />;
          default:
            return null; // tool results are drawn inside their call's card
        }
      })}
    </>
  );
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
}

export function Row({ row, label, actions, removed = false, who, extra, dim = false }: RowProps) {
  if (row.role === "marker") {
    const a = row.anchor;
    return (
      <div class="row marker" data-testid="marker">
        Context compacted
        {a ? ` (${a.tokens_before ?? 0} → ${a.tokens_after ?? 0} tokens)` : ""}
      </div>
    );
  }
  const text = rowText(row);
  return (
    <div
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
        <span class="who">{row.role === "user" ? "You" : (who ?? "Assistant")}</span>
        {row.status === "pending" && <span class="badge live">streaming</span>}
        {row.status === "stopped" && <span class="badge">stopped</span>}
        {row.status === "error" && <span class="badge err">error</span>}
        {removed && <span class="badge">removed</span>}
        {extra}
        {!removed && actions?.(row)}
      </div>
      {row.role === "user" ? <div class="user-text">{text}</div> : <AssistantParts row={row} />}
      {row.error && <div class="row-error">{row.error}</div>}
    </div>
  );
}
