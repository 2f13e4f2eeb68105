/**
 * The agent's commands in the composer: typing `/` lists the commands the topic's agent offers
 * (protocol 1.4: `snapshot.commands`, then `commands-changed`), filtered as the name is typed.
 * Up/Down move, Tab or Enter takes one (`/name ` and its input hint), Esc closes the list. A
 * command is sent as the text `/name args`, an ordinary message the driver handles.
 *
 * The textarea keeps its role (a named textbox) and points at the list with
 * `aria-controls` / `aria-activedescendant`, so a screen reader reads the active command.
 */
import type { CommandInfo } from "hostd-client";
import { useState } from "preact/hooks";

export interface CommandMenu {
  /** Props for the composer's textarea. */
  areaProps: Record<string, string | undefined>;
  /** The list, or null while closed. */
  list: preact.JSX.Element | null;
  /** Keys for the list; true when the key was used. */
  onKey: (e: KeyboardEvent) => boolean;
  /** The hint of the command being written (`/name ` typed), or "". */
  hint: string;
}

export function useCommandMenu(commands: readonly CommandInfo[], text: string, setText: (t: string) => void): CommandMenu {
  const [active, setActive] = useState(0);
  const [closedFor, setClosedFor] = useState<string | null>(null);
  const typed = /^\/(\S*)$/.exec(text);
  const matches = typed && closedFor !== text ? commands.filter((c) => c.name.toLowerCase().startsWith(typed[1]!.toLowerCase())) : [];
  const open = matches.length > 0;
  const current = Math.min(active, matches.length - 1);
  const take = (c: CommandInfo) => {
    setText(c.input_hint ? `/${c.name} ` : `/${c.name}`);
    setActive(0);
  };
  const writing = /^\/(\S+) /.exec(text);
  const hint = writing ? (commands.find((c) => c.name === writing[1])?.input_hint ?? "") : "";
  const onKey = (e: KeyboardEvent): boolean => {
    if (!open) return false;
    const pick = matches[current]!;
    if (e.key === "ArrowDown" || e.key === "ArrowUp") {
      setActive((current + (e.key === "ArrowDown" ? 1 : matches.length - 1)) % matches.length);
    } else if (e.key === "Tab" || (e.key === "Enter" && !e.shiftKey && !e.altKey && text !== `/${pick.name}`)) {
      take(pick);
    } else if (e.key === "Escape") {
      setClosedFor(text);
    } else {
      return false;
    }
    e.preventDefault();
    return true;
  };
  const list = open ? (
    <ul class="command-list" id="command-list" role="listbox" aria-label="Commands">
      {matches.map((c, i) => (
        <li key={c.name} id={`command-${i}`} role="option" aria-selected={i === current}
          class={i === current ? "active" : ""} onMouseDown={(e) => { e.preventDefault(); take(c); }}>
          <span class="command-name">/{c.name}</span>
          {c.input_hint && <span class="command-hint"> {c.input_hint}</span>}
          {c.description && <span class="command-description"> {c.description}</span>}
        </li>
      ))}
    </ul>
  ) : null;
  return {
    areaProps: {
      "aria-autocomplete": "list",
      "aria-controls": open ? "command-list" : undefined,
      "aria-activedescendant": open ? `command-${current}` : undefined,
    },
    list,
    onKey,
    hint,
  };
}
