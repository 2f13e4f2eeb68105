/**
 * The topic list (a named `nav` with a list: a screen reader announces "Topics, navigation,
 * list, N items"), its search box, the new-topic form (driver and model chosen there) and
 * rename / delete through real dialogs.
 *
 * A topic's state badge sits beside its title, never inside the truncated title: a long title
 * hid that its topic was answering.
 */
import type { DriverInfo, TopicInfo } from "hostd-client";
import { useEffect, useRef, useState } from "preact/hooks";

import { session } from "./app_session";
import { askConfirm, askText } from "./dialogs";
import type { ViewState } from "./session";

function NewTopicForm({ onDone }: { onDone: () => void }) {
  const [drivers, setDrivers] = useState<DriverInfo[]>([]);
  const [f, setF] = useState({ title: "", assistant: "", driver: "", model: "", working_dir: "" });
  useEffect(() => {
    void session.call((c) => c.listDrivers()).then((d) => setDrivers(d ?? []));
  }, []);
  const field = (name: keyof typeof f, label: string, hint = "") => (
    <label class="field">
      <span>{label}</span>
      <input name={name} value={f[name]} placeholder={hint}
        onInput={(e) => setF({ ...f, [name]: (e.target as HTMLInputElement).value })} />
    </label>
  );
  return (
    <form
      class="new-topic"
      data-testid="new-topic-form"
      aria-label="New topic"
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
      {field("title", "Title")}
      <label class="field">
        <span>Driver</span>
        <select name="driver" value={f.driver} onChange={(e) => setF({ ...f, driver: (e.target as HTMLSelectElement).value })}>
          <option value="">default driver</option>
          {drivers.map((d) => (
            <option key={d.name} value={d.name} disabled={!d.available} title={d.reason || d.description}>
              {d.name}
              {d.available ? "" : " (unavailable)"}
            </option>
          ))}
        </select>
      </label>
      {field("model", "Model", "the driver's default")}
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
    await session.call((c) => c.renameTopic(topic.id, title.trim()));
    void session.refreshTopics();
  };
  const remove = async () => {
    const yes = await askConfirm({ title: "Delete topic", confirm: "Delete",
      message: <>Delete “{name}” and its whole history? This cannot be undone.</> });
    if (!yes) return;
    await session.call((c) => c.deleteTopic(topic.id));
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
