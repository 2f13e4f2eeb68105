/**
 * Under the transcript: open approvals, queued messages and drafts, and the composer.
 *
 * The composer is named by a real label ("Message"): its placeholder changes with the state
 * (send, steer, queue) and a placeholder is no name for a screen reader.
 */
import type { AnswerTarget, ApprovalInfo, Attachment, MessageRow, SendIntent, TopicInfo } from "hostd-client";
import { useEffect, useRef, useState } from "preact/hooks";

import { AlsoPicker } from "./also_picker";
import { targetLabel } from "./answers";
import { session } from "./app_session";
import { AttachmentChips, MAX_ATTACHMENT_CHARS, pickFiles } from "./attach";
import { useCommandMenu } from "./commands";
import type { ViewState } from "./session";
import { rowText } from "./transcript_view";

// --- approvals, queue and drafts --------------------------------------------------------------

/** A window with room for an approval's input shown at once (styles.css folds the rest). */
const ROOMY = "(min-width: 481px) and (min-height: 561px)";

export function Approvals({ topicId, topic, approvals, rows }: {
  topicId: string;
  /** Names the topic's own driver (lane 0, and a target with a model only); may lag. */
  topic?: TopicInfo;
  approvals: ApprovalInfo[];
  rows: MessageRow[];
}) {
  if (approvals.length === 0) return null;
  // In a multi-answer turn, say which answer asks (its lane's row names its writer).
  const asker = (a: ApprovalInfo): string => {
    const row = rows.find((r) => r.target && r.turn_id === a.turn_id && (r.lane ?? 0) === (a.lane ?? 0));
    return row ? `${targetLabel(row.target, topic)} asks: ` : "";
  };
  // A small window (a phone, a laptop at 200 % zoom) keeps the transcript readable: each
  // card's input starts folded (a native disclosure: Enter / Space on its summary, announced
  // as collapsed or expanded) and the cards scroll inside their own short region.
  const roomy = matchMedia(ROOMY).matches;
  return (
    <section class="approvals" aria-label="Approvals">
      {approvals.map((a) => (
        <div class="approval" key={a.id} role="group" aria-labelledby={`approval-${a.id}`}
          data-testid="approval" data-approval-id={a.id}>
          <div id={`approval-${a.id}`} class="approval-ask">
            {asker(a)}<strong>Allow {a.tool}?</strong> {a.description}
          </div>
          {a.input && Object.keys(a.input).length > 0 && (
            <details class="approval-input" open={roomy}>
              <summary>Input</summary>
              <pre tabIndex={0} aria-label={`${a.tool} input`}>{JSON.stringify(a.input, null, 2)}</pre>
            </details>
          )}
          <div class="approval-buttons">
            <button class="primary" data-testid="allow" onClick={() => session.act((c) => c.answerApproval(topicId, a.id, true))}>
              Allow
            </button>
            <button class="danger" data-testid="deny" onClick={() => session.act((c) => c.answerApproval(topicId, a.id, false, { reason: "denied in the web UI" }))}>
              Deny
            </button>
          </div>
        </div>
      ))}
    </section>
  );
}

function UnsentItem({ topicId, row }: { topicId: string; row: MessageRow }) {
  const [editing, setEditing] = useState<string | null>(null);
  const text = rowText(row);
  return (
    <div class={`unsent unsent-${row.status}`} data-testid="unsent" data-status={row.status} data-text={text}>
      <span class="badge">{row.status === "draft" ? "draft" : "queued"}</span>
      {editing === null ? (
        <span class="unsent-text">{text}</span>
      ) : (
        <textarea
          class="unsent-edit"
          aria-label={row.status === "draft" ? "Edit draft" : "Edit queued message"}
          value={editing}
          autoFocus
          onInput={(e) => setEditing((e.target as HTMLTextAreaElement).value)}
          onKeyDown={async (e) => {
            if (e.key === "Enter" && !e.shiftKey) {
              e.preventDefault();
              await session.act((c) => c.editQueued(topicId, row.id, editing));
              setEditing(null);
            } else if (e.key === "Escape") setEditing(null);
          }}
        />
      )}
      <span class="unsent-buttons">
        {editing === null ? (
          <button class="ghost small" data-testid="edit" onClick={() => setEditing(text)}>
            Edit
          </button>
        ) : (
          <button
            class="ghost small"
            data-testid="save"
            onClick={async () => {
              await session.act((c) => c.editQueued(topicId, row.id, editing));
              setEditing(null);
            }}
          >
            Save
          </button>
        )}
        <button class="ghost small" data-testid="discard" onClick={() => session.act((c) => c.discardQueued(topicId, row.id))}>
          Discard
        </button>
        <button class="primary small" data-testid="send-now" onClick={() => session.act((c) => c.sendNow(topicId, row.id))}>
          Send now
        </button>
      </span>
    </div>
  );
}

export function Unsent({ topicId, rows }: { topicId: string; rows: MessageRow[] }) {
  const unsent = rows.filter((r) => r.status === "queued" || r.status === "draft");
  if (unsent.length === 0) return null;
  return (
    <section class="unsent-list" data-testid="unsent-list" aria-label="Queued messages and drafts">
      {unsent.map((r) => (
        <UnsentItem key={r.id} topicId={topicId} row={r} />
      ))}
    </section>
  );
}

// --- composer ----------------------------------------------------------------------------------

function draftKey(topicId: string): string {
  return `hostd-composer:${topicId}`;
}

export function Composer({ s }: { s: ViewState }) {
  const [text, setText] = useState(() => localStorage.getItem(draftKey(s.topicId)) ?? "");
  const area = useRef<HTMLTextAreaElement>(null);
  const busy = s.topicState !== "idle" || s.activeTurnId !== "";
  useEffect(() => {
    setText(localStorage.getItem(draftKey(s.topicId)) ?? "");
    area.current?.focus();
  }, [s.topicId]);
  const update = (value: string) => {
    setText(value);
    if (value) localStorage.setItem(draftKey(s.topicId), value);
    else localStorage.removeItem(draftKey(s.topicId));
  };
  const [also, setAlso] = useState<AnswerTarget[]>([]);
  // A multi-answer turn is never steered, and a send with `also` never steers: Enter queues.
  const noSteer = also.length > 0 || s.rows.some((r) => r.target && r.turn_id === s.activeTurnId);
  const [images, setImages] = useState<Attachment[]>([]);
  const [refused, setRefused] = useState("");
  const canAttach = session.client?.speaks(1, 5) ?? false;
  // A 1.6 daemon says which drivers take images; the daemon refuses them for the others.
  const driverName = s.topics.find((t) => t.id === s.topicId)?.driver ?? "";
  const driver = s.drivers.find((d) => d.name === driverName);
  const noImages = driver && session.client?.speaks(1, 6) && !driver.images
    ? `the ${driver.name} driver of this topic takes no images (text files still go)` : "";
  const attach = async (files: Iterable<File>) => {
    const used = images.reduce((n, a) => n + a.data.length, 0);
    const picked = await pickFiles(files, MAX_ATTACHMENT_CHARS - used, noImages);
    if (picked.images.length) setImages([...images, ...picked.images]);
    if (picked.texts.length) update([text, ...picked.texts].filter(Boolean).join("\n\n"));
    setRefused(picked.refused.join("; "));
  };
  const send = async (intent: SendIntent) => {
    const body = text.trim() || (images.length ? "(image)" : "");
    if (!body) return;
    const sent = images;
    update("");
    setImages([]);
    const options = { intent, ...(also.length ? { also } : {}), ...(sent.length ? { attachments: sent } : {}) };
    const result = await session.act((c) => c.send(s.topicId, body, options));
    if (result === undefined) {
      update(body); // not sent: give the text and images back
      setImages(sent);
    }
  };
  const stop = () => void session.act((c) => c.stop(s.topicId));
  const menu = useCommandMenu(s.commands, text, update);
  return (
    <>
    {(s.multiAnswer || s.commands.length > 0) && (
      <div class="composer-extras">
        {s.multiAnswer && <AlsoPicker session={session} also={also} setAlso={setAlso} />}
        {s.commands.length > 0 && (
          <button class="ghost small" data-testid="commands" title="The commands this topic's agent offers"
            onClick={() => { update("/"); area.current?.focus(); }}>
            / commands ({s.commands.length})
          </button>
        )}
        {menu.hint && <span class="command-input-hint" id="command-input-hint">input: {menu.hint}</span>}
      </div>
    )}
    {(images.length > 0 || refused) && (
      <div class="composer-extras">
        <AttachmentChips label="Attachments to send" images={images} remove={(i) => setImages(images.filter((_, j) => j !== i))} />
        {refused && <span class="attach-refused" role="alert">{refused}</span>}
      </div>
    )}
    <div class="composer"
      onDragOver={(e) => canAttach && e.preventDefault()}
      onDrop={(e) => {
        if (!canAttach || !e.dataTransfer?.files.length) return;
        e.preventDefault();
        void attach(e.dataTransfer.files);
      }}>
      {menu.list}
      <label for="composer" class="sr-only">Message</label>
      <textarea
        ref={area}
        id="composer"
        data-testid="composer"
        rows={3}
        {...menu.areaProps}
        aria-describedby={menu.hint ? "command-input-hint" : undefined}
        placeholder={
          busy
            ? noSteer
              ? "Queue the next message (Enter), Esc stops"
              : "Steer the answer (Enter), queue it (Alt-Enter), Esc stops"
            : also.length
              ? `Message for ${also.length + 1} answerers (Enter sends)`
              : "Message (Enter sends, Shift-Enter new line)"
        }
        value={text}
        onInput={(e) => update((e.target as HTMLTextAreaElement).value)}
        onPaste={(e) => {
          const files = [...(e.clipboardData?.files ?? [])];
          if (!canAttach || files.length === 0) return;
          e.preventDefault();
          void attach(files);
        }}
        onKeyDown={(e) => {
          if (menu.onKey(e)) return;
          if (e.key === "Enter" && !e.shiftKey) {
            e.preventDefault();
            void send(e.altKey ? "queue" : "auto");
          } else if (e.key === "Escape" && busy) {
            e.preventDefault();
            stop();
          }
        }}
      />
      <div class="composer-buttons">
        <button class="primary" data-testid="send" onClick={() => void send("auto")} title="Enter">
          {busy ? (noSteer ? "Queue" : "Steer") : "Send"}
        </button>
        {!(busy && noSteer) && (
          <button class="ghost" data-testid="queue" onClick={() => void send("queue")} title="Alt-Enter">
            Queue
          </button>
        )}
        <button class="danger" data-testid="stop" disabled={!busy} onClick={stop} title="Esc (stops every answer)">
          Stop
        </button>
        {canAttach && (
          <label class="button ghost attach-button" title="Attach images or text files (or paste, or drop them here)">
            Attach
            <input type="file" multiple class="sr-only" data-testid="attach" data-images={noImages ? "no" : "yes"}
              accept="image/png,image/jpeg,image/gif,image/webp,text/*,.md,.py,.ts,.js,.json,.toml,.yaml,.yml,.sh,.diff,.patch,.csv,.log"
              onChange={(e) => {
                const input = e.target as HTMLInputElement;
                void attach([...(input.files ?? [])]).then(() => (input.value = ""));
              }} />
          </label>
        )}
      </div>
    </div>
    </>
  );
}

