/**
 * The `hostd web` page: topic list, live transcript, composer, queue and drafts, approvals.
 *
 * Every window is equal (DESIGN.md invariant 2): what one page does (send, steer, stop, answer
 * an approval, edit a draft) reaches the others through the daemon's events, never directly.
 */
import "./styles.css";

import { render } from "preact";
import { useEffect, useState } from "preact/hooks";

import { session } from "./app_session";
import { Approvals, Composer, Unsent } from "./composer";
import { desktopNotify, inDesktopApp, openWindow } from "./desktop";
import { DialogHost } from "./dialogs";
import { RemovedSwitch, rowActions } from "./row_menu";
import { maybeNotify, notifySupported, notifyWanted, setNotify } from "./notify";
import { SchedulesPanel } from "./schedules";
import { installShortcuts, showShortcuts } from "./shortcuts";
import type { ViewState } from "./session";
import { Sidebar } from "./topics";
import { TranscriptView } from "./transcript_view";

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
  const icon: Record<Theme, string> = { auto: "◐", light: "☀", dark: "☾" };
  // Named in words ("Theme: auto"), not by its glyph; on a narrow window only the glyph shows.
  return (
    <button class="ghost" aria-label={`Theme: ${theme}`} title="theme: auto / light / dark"
      onClick={() => setTheme(next[theme])}>
      <span aria-hidden="true">{icon[theme]}</span>
      <span class="wide-only" aria-hidden="true"> {theme}</span>
    </button>
  );
}

/** Notifications in a background tab: on / off (the browser asks for permission on "on"). */
function NotifyToggle() {
  const [on, setOn] = useState(notifyWanted);
  if (!notifySupported()) return null;
  return (
    <button class="ghost" aria-pressed={on} aria-label="Notifications" data-testid="notify"
      title="Notify me when an answer finishes or an approval waits in a background tab"
      onClick={async () => setOn(await setNotify(!on))}>
      <svg class="icon" viewBox="0 0 16 16" aria-hidden="true">
        <path d="M8 1.5a4 4 0 0 0-4 4v3L2.5 11h11L12 8.5v-3a4 4 0 0 0-4-4zM6.5 12.5a1.5 1.5 0 0 0 3 0" />
        {!on && <path d="M2 2l12 12" />}
      </svg>
      <span class="wide-only"> Notifications</span>
    </button>
  );
}

session.onEvent = (item) => {
  const topic = session.state.topics.find((t) => t.id === session.state.topicId);
  maybeNotify(item, topic);
  desktopNotify(item, topic);
};

// --- header ----------------------------------------------------------------------------------

/** The connection state as a `status` live region: a drop and a reconnect are announced. */
function ConnIndicator({ s }: { s: ViewState }) {
  const text = s.conn === "online" ? "connected" : s.conn === "connecting" ? "connecting…" : "offline";
  return (
    <span class={`conn conn-${s.conn}`} data-testid="conn" data-conn={s.conn} title={s.connReason}>
      <span role="status" aria-label="Connection" class="conn-status">
        <span class="dot" aria-hidden="true" /> {text}
        {s.conn === "offline" && s.connReason && <span class="sr-only">: {s.connReason}</span>}
      </span>
      {s.conn === "offline" && (
        <button class="ghost small" onClick={() => session.reconnectNow()}>
          retry
        </button>
      )}
    </span>
  );
}

// --- topic view -----------------------------------------------------------------------------------

function TopicView({ s }: { s: ViewState }) {
  const topic = s.topics.find((t) => t.id === s.topicId);
  const u = s.usage;
  return (
    <main class="topic">
      <div class="topic-head">
        <h1 title={topic?.title || undefined}>{topic?.title || "(untitled)"}</h1>
        <span class="meta">
          {[topic?.assistant, topic?.driver, topic?.model].filter(Boolean).join(" · ")}
        </span>
        <span class={`badge state-${s.topicState}`} data-testid="topic-state" data-state={s.topicState}>
          {s.topicState}
        </span>
        <RemovedSwitch session={session} s={s} />
        {inDesktopApp() && s.topicId && (
          <button class="ghost small" data-testid="new-window" onClick={() => openWindow(s.topicId)}>
            Open in new window
          </button>
        )}
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
        approvals={s.approvals}
        choose={s.multiAnswer ? (row) => void session.act((c) => c.chooseAnswer(s.topicId, row.id)) : undefined}
        stopAnswer={s.stopOneAnswer ? (row) => void session.act((c) => c.stop(s.topicId, { rowId: row.id })) : undefined}
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
      <p role="status" class="approval-closed" data-testid="approval-closed">{s.approvalClosed}</p>
      <Unsent topicId={s.topicId} rows={s.rows} />
      <Composer key={s.topicId} s={s} />
    </main>
  );
}

function App() {
  const s = useSession();
  // The topic list is a drawer on narrow windows (CSS decides when); it closes once a topic
  // is picked.
  const [drawer, setDrawer] = useState(false);
  useEffect(() => setDrawer(false), [s.topicId]);
  useEffect(() => installShortcuts(() => {
    if (matchMedia("(max-width: 900px)").matches) setDrawer(true);
    requestAnimationFrame(() => document.querySelector<HTMLInputElement>("[data-testid=topic-search]")?.focus());
  }), []);
  useEffect(() => {
    const onHash = () => void session.open(topicFromHash());
    window.addEventListener("hashchange", onHash);
    onHash();
    // The session keeps the topic list live (`watch-topics`; a poll for an older daemon).
    void session.run();
    return () => window.removeEventListener("hashchange", onHash);
  }, []);
  return (
    <div class="app">
      <header>
        <button class="ghost drawer-toggle" aria-controls="sidebar" aria-expanded={drawer}
          onClick={() => setDrawer(!drawer)}>
          <span aria-hidden="true">☰</span> Topics
        </button>
        <span class="brand">hostd</span>
        <ConnIndicator s={s} />
        <span class="spacer" />
        <NotifyToggle />
        <button class="ghost" aria-label="Keyboard shortcuts" title="Keyboard shortcuts (?)" onClick={showShortcuts}>?</button>
        <ThemeToggle />
      </header>
      {/* Keys: a banner that comes or goes must not take the place (and DOM) of its
          unkeyed sibling: Preact matched the new banner with the page body, which then was
          made anew, losing the new-topic form and every other state below it. */}
      {s.conn === "offline" && s.connReason && (
        <div key="conn" class="conn-banner" data-testid="conn-reason">{s.connReason}</div>
      )}
      {s.error && (
        <div key="error" class="error-banner" role="alert" data-testid="error" onClick={() => session.clearError()}>
          <span class="error-text">{s.error}</span>
          {/* It stays until read: dismissed here, replaced, or cleared by the user's next action. */}
          <button class="ghost small" aria-label="Dismiss error" title="Dismiss" onClick={() => session.clearError()}>
            ✕
          </button>
        </div>
      )}
      <div key="body" class="body">
        <Sidebar s={s} open={drawer} close={() => setDrawer(false)} />
        {s.topicId ? <TopicView s={s} /> : <main class="topic empty-topic">Pick a topic or create one.</main>}
      </div>
      <DialogHost />
    </div>
  );
}

render(<App />, document.getElementById("app")!);
