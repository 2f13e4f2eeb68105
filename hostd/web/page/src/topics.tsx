/**
 * The topic list (a named `nav` with a list: a screen reader announces "Topics, navigation,
 * list, N items"), its search box, the new-topic form (driver and model chosen there) and
 * rename / delete through real dialogs.
 *
 * A topic's state badge sits beside its title, never inside the truncated title: a long title
 * hid that its topic was answering.
 */
import { HostdError, type AssistantInfo, type DriverInfo, type TopicInfo } from "hostd-client";
import { useEffect, useRef, useState } from "preact/hooks";

import { session } from "./app_session";
import { askConfirm, askText } from "./dialogs";
import type { ViewState } from "./session";

/**
 * What the form's "default" choice stands for: the built-in `default` assistant as
 * `list-assistants` (1.3) describes it (the driver a topic naming none gets, and whether it
 * can answer). Null from an older daemon: the choice is then offered unexplained.
 */
function defaultChoice(assistants: AssistantInfo[] | undefined): AssistantInfo | null {
  return assistants?.find((a) => a.builtin && a.name === "default") ?? null;
}

/** A refused create said in the page's terms: its hints name `hostd` commands. */
function createFailure(exc: unknown, f: { driver: string }): string | null {
  if (!(exc instanceof HostdError)) return null;
  if (!f.driver && (exc.code === "auth_required" || exc.code === "driver_unavailable")) {
    const reason = typeof exc.details.reason === "string" ? exc.details.reason : exc.message;
    return `The default driver cannot answer: ${reason}. Pick a ready driver in the Driver list (each unavailable one says why). [${exc.code}]`;
  }
  return null;
}

function NewTopicForm({ onDone }: { onDone: () => void }) {
  const [drivers, setDrivers] = useState<DriverInfo[]>([]);
  const [fallback, setFallback] = useState<AssistantInfo | null>(null);
  const [f, setF] = useState({ title: "", assistant: "", driver: "", model: "", working_dir: "" });
  useEffect(() => {
    void (async () => {
      const [d, a] = await Promise.all([
        session.call((c) => c.listDrivers()),
        session.call((c) => (c.speaks(1, 3) ? c.listAssistants() : Promise.resolve(undefined))),
      ]);
      const list = d ?? [];
      const dflt = defaultChoice(a);
      setDrivers(list);
      setFallback(dflt);
      // The default cannot answer: start on a driver that can, instead of a sure refusal.
      const ready = list.find((x) => x.available && x.credential_ok !== false);
      if (dflt && !dflt.available && ready) setF((cur) => (cur.driver ? cur : { ...cur, driver: ready.name }));
    })();
  }, []);
  const defaultLabel = fallback === null
    ? "default driver"
    : fallback.available
      ? `default (${fallback.driver || "its role"})`
      : "default (not ready)";
  const field = (name: keyof typeof f, label: string, hint = "", required = false) => (
    <label class="field">
      <span>{label}{required && <span aria-hidden="true"> *</span>}</span>
      <input name={name} value={f[name]} placeholder={hint}
        required={required} aria-required={required ? "true" : undefined}
        aria-describedby={required ? `${name}-why` : undefined}
        onInput={(e) => setF({ ...f, [name]: (e.target as HTMLInputElement).value })} />
    </label>
  );
  // A driver with no default model (`needs_model`, 1.7): the daemon would refuse the topic
  // unless its assistant names one, so the field is required and says why.
  const chosen = drivers.find((d) => d.name === f.driver);
  const needsModel = Boolean(chosen?.needs_model) && !f.assistant.trim();
  return (
    <form
      class="new-topic"
      data-testid="new-topic-form"
      aria-label="New topic"
      onSubmit={async (e) => {
        e.preventDefault();
        const topic = await session.act(async (c) => {
          try {
            return await c.createTopic(f);
          } catch (exc) {
            const said = createFailure(exc, f);
            if (said === null) throw exc;
            session.fail(new Error(said));
            return undefined;
          }
        });
        if (topic) {
          await session.refreshTopics();
          window.location.hash = `topic=${topic.id}`;
          onDone();
        }
      }}
    >
      {field("title", "Title")}
      <label class="field">
        <span>Driver</span>
        <select name="driver" value={f.driver} onChange={(e) => setF({ ...f, driver: (e.target as HTMLSelectElement).value })}>
          <option value="" disabled={fallback !== null && !fallback.available}
            title={fallback && !fallback.available ? fallback.error : undefined}>
            {defaultLabel}
          </option>
          {drivers.map((d) => (
            <option key={d.name} value={d.name} disabled={!d.available} title={d.reason || d.description}>
              {d.name}
              {d.available ? "" : " (unavailable)"}
            </option>
          ))}
        </select>
      </label>
      {fallback !== null && !fallback.available && (
        <p class="field-note" data-testid="default-not-ready">The default driver is not ready: {fallback.error}</p>
      )}
      {field("model", "Model", needsModel ? "required" : "the driver's default", needsModel)}
      {needsModel && (
        <p class="field-note" id="model-why" data-testid="model-required">
          Model required: the {f.driver} driver has no default model (or name an assistant that
          has one).
        </p>
      )}
      {field("assistant", "Assistant", "none")}
      {field("working_dir", "Working directory", "hostd's default")}
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

function TopicItem({ topic, current, state }: { topic: TopicInfo; current: boolean; state?: string }) {
  const name = topic.title || "(untitled)";
  const busy = state && state !== "idle";
  const rename = async () => {
    const title = await askText({ title: "Rename topic", label: "Title", initial: topic.title ?? "", submit: "Rename" });
    if (title === null) return;
    await session.act((c) => c.renameTopic(topic.id, title.trim()));
    void session.refreshTopics();
  };
  const remove = async () => {
    const yes = await askConfirm({ title: "Delete topic", confirm: "Delete",
      message: <>Delete “{name}” and its whole history? This cannot be undone.</> });
    if (!yes) return;
    await session.act((c) => c.deleteTopic(topic.id));
    if (current) window.location.hash = "";
    void session.refreshTopics();
  };
  return (
    <li class={`topic-item ${current ? "current" : ""}`} data-testid="topic-item">
      <a href={`#topic=${topic.id}`} class="topic-title" aria-current={current ? "page" : undefined} title={name}>
        {name}
      </a>
      {busy && <span class={`badge state-${state}`}>{state}</span>}
      <span class="topic-actions">
        <button class="ghost small" title="rename" aria-label={`Rename ${name}`} onClick={() => void rename()}>
          ✎
        </button>
        <button class="ghost small" title="delete" aria-label={`Delete ${name}`} onClick={() => void remove()}>
          ✕
        </button>
      </span>
    </li>
  );
}

/** Topics whose title (or id) holds every word of `query`, case-insensitively. */
export function searchTopics(topics: readonly TopicInfo[], query: string): TopicInfo[] {
  const words = query.toLowerCase().split(/\s+/).filter(Boolean);
  if (words.length === 0) return [...topics];
  return topics.filter((t) => {
    const hay = `${t.title ?? ""} ${t.id} ${t.driver ?? ""} ${t.model ?? ""}`.toLowerCase();
    return words.every((w) => hay.includes(w));
  });
}

/** The topic list; on a narrow window a drawer (`open`; Esc closes it). */
export function Sidebar({ s, open, close }: { s: ViewState; open: boolean; close: () => void }) {
  const [creating, setCreating] = useState(false);
  const [query, setQuery] = useState("");
  const search = useRef<HTMLInputElement>(null);
  useEffect(() => {
    if (open) search.current?.focus();
  }, [open]);
  const shown = searchTopics(s.topics, query);
  return (
    <aside class={`sidebar ${open ? "open" : ""}`} id="sidebar"
      onKeyDown={(e) => open && e.key === "Escape" && close()}>
      <div class="sidebar-head">
        <h2>Topics</h2>
        <button class="primary small" data-testid="new-topic" aria-expanded={creating} onClick={() => setCreating(!creating)}>
          + New
        </button>
      </div>
      {creating && <NewTopicForm onDone={() => setCreating(false)} />}
      <input ref={search} type="search" class="topic-search" aria-label="Search topics" placeholder="Search topics (/)"
        data-testid="topic-search" value={query} onInput={(e) => setQuery((e.target as HTMLInputElement).value)} />
      <nav aria-label="Topics" onClick={(e) => (e.target as Element).closest("a") && close()}>
        <ul class="topic-list">
          {shown.map((t) => (
            // The open topic's state is live (its events); the others' from the topic list's
            // watch (protocol 1.6; an older daemon's: as last listed).
            <TopicItem key={t.id} topic={t} current={t.id === s.topicId} state={t.id === s.topicId ? s.topicState : t.state} />
          ))}
        </ul>
        {s.topics.length === 0 && <p class="empty">No topics yet.</p>}
        {s.topics.length > 0 && shown.length === 0 && <p class="empty">No topic matches “{query}”.</p>}
      </nav>
    </aside>
  );
}
