/**
 * "Also answer with": more answerers for the next messages (a send's `also`). Drivers come
 * from the daemon's list (`list-drivers`, available ones), assistants from `list-assistants`
 * (protocol 1.3; one that cannot answer is shown disabled, its error as the tooltip); any
 * other target is typed (`@assistant`, `driver/model`, `/model`, `driver`: as
 * `hostd send --also`). The choice stays (chips beside Send) until removed, so a comparison
 * can go on for several messages; each chip says who will answer too.
 */
import type { AnswerTarget, AssistantInfo, DriverInfo } from "hostd-client";
import { useState } from "preact/hooks";

import type { Session } from "./session";

/** At most 7 more answerers (8 answers in all), as the daemon allows. */
export const MAX_ALSO = 7;

/** A target as typed (and as `hostd send --also` takes it): `@assistant`, `driver/model`,
 * `driver`, `/model` (the topic's driver with that model). */
export function targetKey(t: AnswerTarget): string {
  if (t.assistant) return `@${t.assistant}`;
  return t.model ? `${t.driver ?? ""}/${t.model}` : (t.driver ?? "");
}

/** The typed target (see `targetKey`); null when it names nobody. */
export function parseTarget(text: string): AnswerTarget | null {
  const t = text.trim();
  if (!t) return null;
  if (t.startsWith("@")) return t.length > 1 ? { assistant: t.slice(1) } : null;
  const slash = t.indexOf("/");
  if (slash < 0) return { driver: t };
  const driver = t.slice(0, slash).trim();
  const model = t.slice(slash + 1).trim();
  return driver || model ? { ...(driver ? { driver } : {}), ...(model ? { model } : {}) } : null;
}

export function AlsoPicker({
  session,
  also,
  setAlso,
}: {
  session: Session;
  also: AnswerTarget[];
  setAlso: (also: AnswerTarget[]) => void;
}) {
  const [open, setOpen] = useState(false);
  const [drivers, setDrivers] = useState<DriverInfo[]>([]);
  const [typed, setTyped] = useState("");
  const keys = new Set(also.map(targetKey));
  const [assistants, setAssistants] = useState<AssistantInfo[]>([]);
  const toggle = async () => {
    if (!open) {
      const [d, a] = await Promise.all([
        session.call((c) => c.listDrivers()),
        // A daemon older than 1.3 cannot list them: they are typed as @name there.
        session.call((c) => (c.speaks(1, 3) ? c.listAssistants() : Promise.resolve([]))),
      ]);
      setDrivers(d ?? []);
      setAssistants(a ?? []);
    }
    setOpen(!open);
  };
  const add = (t: AnswerTarget | null) => {
    if (t === null || keys.has(targetKey(t)) || also.length >= MAX_ALSO) return;
    setAlso([...also, t]);
  };
  const remove = (key: string) => setAlso(also.filter((t) => targetKey(t) !== key));
  return (
    <div class="also" data-testid="also">
      <button class="ghost small" data-testid="also-toggle" aria-expanded={open}
        title="Let more models or assistants answer the same message, side by side"
        onClick={() => void toggle()}>
        + also answer with{also.length ? ` (${also.length})` : ""}
      </button>
      {also.map((t) => (
        <span class="chip" key={targetKey(t)} data-testid="also-chip" data-target={targetKey(t)}>
          {targetKey(t)}
          <button class="ghost small" title="remove" onClick={() => remove(targetKey(t))}>✕</button>
        </span>
      ))}
      {open && (
        <div class="also-panel" data-testid="also-panel">
          {drivers.filter((d) => d.available).map((d) => (
            <label key={d.name} title={d.description}>
              <input type="checkbox" data-testid="also-driver" data-driver={d.name} checked={keys.has(d.name)}
                onChange={(e) => ((e.target as HTMLInputElement).checked ? add({ driver: d.name }) : remove(d.name))} />
              {d.name}
            </label>
          ))}
          {assistants.map((a) => (
            <label key={`@${a.name}`}
              title={a.error || [a.description, `${a.driver}${a.model ? `/${a.model}` : ""}`].filter(Boolean).join(" · ")}>
              <input type="checkbox" data-testid="also-assistant" data-assistant={a.name} disabled={!a.available}
                checked={keys.has(`@${a.name}`)}
                onChange={(e) => ((e.target as HTMLInputElement).checked ? add({ assistant: a.name }) : remove(`@${a.name}`))} />
              @{a.name}
            </label>
          ))}
          <form onSubmit={(e) => { e.preventDefault(); add(parseTarget(typed)); setTyped(""); }}>
            <input data-testid="also-input" placeholder="driver/model, /model or @assistant; Enter adds" value={typed}
              onInput={(e) => setTyped((e.target as HTMLInputElement).value)} />
          </form>
        </div>
      )}
    </div>
  );
}
