/**
 * The `hostd web` page: topic list, live transcript, composer, queue and drafts, approvals.
 *
 * Every window is equal (DESIGN.md invariant 2): what one page does (send, steer, stop, answer
 * an approval, edit a draft) reaches the others through the daemon's events, never directly.
 */
import "./styles.css";

import type { AnswerTarget, ApprovalInfo, DriverInfo, MessageRow, SendIntent, TopicInfo } from "hostd-client";
import { render } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";

import { AlsoPicker } from "./also_picker";
import { targetLabel } from "./answers";
import { SchedulesPanel } from "./schedules";
import { Session, type ViewState } from "./session";
import { RemovedSwitch, rowActions } from "./row_menu";
import { rowText, TranscriptView } from "./transcript_view";

const session = new Session();

function topicFromHash(): string {
  const m = /topic=([\w-]+)/.exec(window.location.hash);
  return m ? m[1]! : "";
}

/**
 * The session's state, redrawn at most once per animation frame. A streaming answer changes
 * the state on every event (hundreds per second), and each redraw re-renders the transcript,
 * re-parses the streaming answer's Markdown and lays the page out again (the scroll to the
 * end): one redraw per event froze the page for seconds on a 100k-character answer. A hidden
 * page gets no frames, so it redraws on a timer instead (browsers slow those down to ~1/s).
 */
function useSession(): ViewState {
  const [state, setState] = useState(session.state);
  useEffect(() => {
    let frame = 0;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const flush = (): void => {
      cancelAnimationFrame(frame);
      clearTimeout(timer);
      frame = 0;
      timer = undefined;
      setState(session.state);
    };
    const unsubscribe = session.subscribe(() => {
      if (frame !== 0 || timer !== undefined) return;
      if (document.visibilityState === "hidden") timer = setTimeout(flush, 100);
      else frame = requestAnimationFrame(flush);
    });
    // A page shown again redraws at once (a timer may still be pending).
    const onVisible = (): void => {
      if (document.visibilityState === "visible" && timer !== undefined) flush();
    };
    document.addEventListener("visibilitychange", onVisible);
    return () => {
      unsubscribe();
      document.removeEventListener("visibilitychange", onVisible);
      cancelAnimationFrame(frame);
      clearTimeout(timer);
    };
  }, []);
  return state;
}

// --- theme -----------------------------------------------------------------------------------

type Theme = "auto" | "light" | "dark";

function applyTheme(theme: Theme): void {
  document.documentElement.dataset.theme = theme;
  localStorage.setItem("hostd-theme", theme);
}

function ThemeToggle() {
  const [theme, setTheme] = useState<Theme>((localStorage.getItem("hostd-theme") as Theme) || "auto");
  useEffect(() => applyTheme(theme), [theme]);
  const next: Record<Theme, Theme> = { auto: "light", light: "dark", dark: "auto" };
  return (
    <button class="ghost" title="theme: auto / light / dark" onClick={() => setTheme(next[theme])}>
      {theme === "dark" ? "☾ dark" : theme === "light" ? "☀ light" : "◐ auto"}
    </button>
  );
}

// --- header ----------------------------------------------------------------------------------

function ConnIndicator({ s }: { s: ViewState }) {
  const text = s.conn === "online" ? "connected" : s.conn === "connecting" ? "connecting…" : "offline";
  return (
    <span class={`conn conn-${s.conn}`} data-testid="conn" data-conn={s.conn} title={s.connReason}>
      <span class="dot" /> {text}
      {s.conn === "offline" && (
        <>
          <span class="conn-reason">{s.connReason}</span>
          <button class="ghost small" onClick={() => session.reconnectNow()}>
            retry
          </button>
        </>
      )}
    </span>
  );
}

// --- topics ----------------------------------------------------------------------------------

function NewTopicForm({ onDone }: { onDone: () => void }) {
  const [drivers, setDrivers] = useState<DriverInfo[]>([]);
  const [f, setF] = useState({ title: "", assistant: "", driver: "", model: "", working_dir: "" });
  useEffect(() => {
    void session.call((c) => c.listDrivers()).then((d) => setDrivers(d ?? []));
  }, []);
  const field = (name: keyof typeof f, placeholder: string) => (
    <input
      name={name}
      placeholder={placeholder}
      value={f[name]}
      onInput={(e) => setF({ ...f, [name]: (e.target as HTMLInputElement).value })}
    />
  );
  return (
    <form
      class="new-topic"
      data-testid="new-topic-form"
      onSubmit={async (e) => {
        e.preventDefault();
        const topic = await session.call((c) => c.createTopic(f));
        if (topic) {
          await session.refreshTopics();
          window.location.hash = `topic=${topic.id}`;
          onDone();
        }
      }}
    >
      {field("title", "title")}
      {field("assistant", "assistant (optional)")}
      <select name="driver" value={f.driver} onChange={(e) => setF({ ...f, driver: (e.target as HTMLSelectElement).value })}>
        <option value="">default driver</option>
        {drivers.map((d) => (
          <option key={d.name} value={d.name} disabled={!d.available} title={d.reason || d.description}>
            {d.name}
            {d.available ? "" : " (unavailable)"}
          </option>
        ))}
      </select>
      {field("model", "model (optional)")}
      {field("working_dir", "working directory (optional)")}
      <div class="form-buttons">
        <button type="submit" class="primary">
          Create
        </button>
        <button type="button" class="ghost" onClick={onDone}>
          Cancel
        </button>
      </div>
    </form>
  );
}

function TopicItem({ topic, current }: { topic: ViewState["topics"][number]; current: boolean }) {
  const [editing, setEditing] = useState(false);
  const [title, setTitle] = useState(topic.title ?? "");
  if (editing) {
    return (
      <form
        class="topic-item editing"
        onSubmit={async (e) => {
          e.preventDefault();
          await session.call((c) => c.renameTopic(topic.id, title));
          setEditing(false);
          void session.refreshTopics();
        }}
      >
        <input value={title} autoFocus onInput={(e) => setTitle((e.target as HTMLInputElement).value)}
          onKeyDown={(e) => e.key === "Escape" && setEditing(false)} />
      </form>
    );
  }
  return (
    <div class={`topic-item ${current ? "current" : ""}`} data-testid="topic-item">
      <a href={`#topic=${topic.id}`} class="topic-title">
        {topic.title || "(untitled)"}
        {topic.state && topic.state !== "idle" && <span class={`badge state-${topic.state}`}>{topic.state}</span>}
      </a>
      <span class="topic-actions">
        <button class="ghost small" title="rename" onClick={() => { setTitle(topic.title ?? ""); setEditing(true); }}>
          ✎
        </button>
        <button
          class="ghost small"
          title="delete"
          onClick={async () => {
            if (!window.confirm(`Delete topic “${topic.title || topic.id}”?`)) return;
            await session.call((c) => c.deleteTopic(topic.id));
            if (current) window.location.hash = "";
            void session.refreshTopics();
          }}
        >
          ✕
        </button>
      </span>
    </div>
  );
}

function Sidebar({ s }: { s: ViewState }) {
  const [creating, setCreating] = useState(false);
  return (
    <aside class="sidebar">
      <div class="sidebar-head">
        <span>Topics</span>
        <button class="primary small" data-testid="new-topic" onClick={() => setCreating(!creating)}>
          + New
        </button>
      </div>
      {creating && <NewTopicForm onDone={() => setCreating(false)} />}
      <nav class="topic-list">
        {s.topics.map((t) => (
          <TopicItem key={t.id} topic={t} current={t.id === s.topicId} />
        ))}
        {s.topics.length === 0 && <div class="empty">No topics yet.</div>}
      </nav>
    </aside>
  );
}

// --- approvals, queue and drafts --------------------------------------------------------------

function Approvals({ topicId, topic, approvals, rows }: {
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
  return (
    <div class="approvals">
      {approvals.map((a) => (
        <div class="approval" key={a.id} data-testid="approval" data-approval-id={a.id}>
          <div>
            {asker(a)}<strong>Allow {a.tool}?</strong> {a.description}
          </div>
          {a.input && Object.keys(a.input).length > 0 && <pre>{JSON.stringify(a.input, null, 2)}</pre>}
          <div class="approval-buttons">
            <button class="primary" data-testid="allow" onClick={() => session.call((c) => c.answerApproval(topicId, a.id, true))}>
              Allow
            </button>
            <button class="danger" data-testid="deny" onClick={() => session.call((c) => c.answerApproval(topicId, a.id, false, { reason: "denied in the web UI" }))}>
              Deny
            </button>
          </div>
        </div>
      ))}
    </div>
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
          value={editing}
          autoFocus
          onInput={(e) => setEditing((e.target as HTMLTextAreaElement).value)}
          onKeyDown={async (e) => {
            if (e.key === "Enter" && !e.shiftKey) {
              e.preventDefault();
              await session.call((c) => c.editQueued(topicId, row.id, editing));
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
              await session.call((c) => c.editQueued(topicId, row.id, editing));
              setEditing(null);
            }}
          >
            Save
          </button>
        )}
        <button class="ghost small" data-testid="discard" onClick={() => session.call((c) => c.discardQueued(topicId, row.id))}>
          Discard
        </button>
        <button class="primary small" data-testid="send-now" onClick={() => session.call((c) => c.sendNow(topicId, row.id))}>
          Send now
        </button>
      </span>
    </div>
  );
}

function Unsent({ topicId, rows }: { topicId: string; rows: MessageRow[] }) {
  const unsent = rows.filter((r) => r.status === "queued" || r.status === "draft");
  if (unsent.length === 0) return null;
  return (
    <div class="unsent-list" data-testid="unsent-list">
      {unsent.map((r) => (
        <UnsentItem key={r.id} topicId={topicId} row={r} />
      ))}
    </div>
  );
}

// --- composer ----------------------------------------------------------------------------------

function draftKey(topicId: string): string {
  return `hostd-composer:${topicId}`;
}

function Composer({ s }: { s: ViewState }) {
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
  const send = async (intent: SendIntent) => {
    const body = text.trim();
    if (!body) return;
    update("");
    const options = also.length ? { intent, also } : { intent };
    const result = await session.call((c) => c.send(s.topicId, body, options));
    if (result === undefined) update(body); // not sent: give the text back
  };
  const stop = () => void session.call((c) => c.stop(s.topicId));
  return (
    <>
    {s.multiAnswer && (
      <div class="composer-extras">
        <AlsoPicker session={session} also={also} setAlso={setAlso} />
      </div>
    )}
    <div class="composer">
      <textarea
        ref={area}
        data-testid="composer"
        rows={3}
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
        onKeyDown={(e) => {
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
      </div>
    </div>
    </>
  );
}

// --- topic view -----------------------------------------------------------------------------------

function TopicView({ s }: { s: ViewState }) {
  const topic = s.topics.find((t) => t.id === s.topicId);
  const u = s.usage;
  return (
    <main class="topic">
      <div class="topic-head">
        <h1>{topic?.title || "(untitled)"}</h1>
        <span class="meta">
          {[topic?.assistant, topic?.driver, topic?.model].filter(Boolean).join(" · ")}
        </span>
        <span class={`badge state-${s.topicState}`} data-testid="topic-state" data-state={s.topicState}>
          {s.topicState}
        </span>
        <RemovedSwitch session={session} s={s} />
        {u && (
          <span class="usage" data-testid="usage">
            in {u.input_tokens} · out {u.output_tokens}
            {u.cost_usd ? ` · $${u.cost_usd.toFixed(4)}` : ""}
          </span>
        )}
      </div>
      <SchedulesPanel session={session} topicId={s.topicId} rowCount={s.rows.length} online={s.conn === "online"} />
      {s.topicState === "compacting" && (
        <div class="compacting" data-testid="compacting">
          Compacting the conversation…
        </div>
      )}
      <TranscriptView
        topic={topic}
        busyTurn={s.activeTurnId}
        choose={s.multiAnswer ? (row) => void session.call((c) => c.chooseAnswer(s.topicId, row.id)) : undefined}
        stopAnswer={s.stopOneAnswer ? (row) => void session.call((c) => c.stop(s.topicId, { rowId: row.id })) : undefined}
        rows={s.older.length ? [...s.older, ...s.rows] : s.rows}
        removed={s.removed}
        actions={rowActions(session, s)}
        older={s.hasOlder && (
          <button class="ghost small earlier" data-testid="load-older" onClick={() => void session.loadOlder()}>
            Earlier messages
          </button>
        )}
      />
      <Approvals topicId={s.topicId} topic={topic} approvals={s.approvals} rows={s.rows} />
      <Unsent topicId={s.topicId} rows={s.rows} />
      <Composer key={s.topicId} s={s} />
    </main>
  );
}

function App() {
  const s = useSession();
  useEffect(() => {
    const onHash = () => void session.open(topicFromHash());
    window.addEventListener("hashchange", onHash);
    onHash();
    void session.run();
    // No topic-list event in the protocol yet: poll it (cheap, one request).
    const timer = setInterval(() => void session.refreshTopics(), 5000);
    return () => {
      window.removeEventListener("hashchange", onHash);
      clearInterval(timer);
    };
  }, []);
  return (
    <div class="app">
      <header>
        <span class="brand">hostd</span>
        <ConnIndicator s={s} />
        <span class="spacer" />
        <ThemeToggle />
      </header>
      {s.error && (
        <div class="error-banner" data-testid="error" onClick={() => session.clearError()}>
          {s.error}
        </div>
      )}
      <div class="body">
        <Sidebar s={s} />
        {s.topicId ? <TopicView s={s} /> : <main class="topic empty-topic">Pick a topic or create one.</main>}
      </div>
    </div>
  );
}

render(<App />, document.getElementById("app")!);
