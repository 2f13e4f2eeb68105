/**
 * Keyboard shortcuts: the page-wide ones (`?` help, `/` search topics) and the overlay that
 * lists every shortcut, the composer's included.
 */
import { showInfo } from "./dialogs";

const SHORTCUTS: Array<[string, string]> = [
  ["Enter", "send (a steer while an answer streams)"],
  ["Shift+Enter", "new line"],
  ["Alt+Enter", "queue the message"],
  ["Esc", "stop the answer (in the composer); close a dialog or the topic drawer"],
  ["/", "search topics"],
  ["?", "this list"],
];

export function showShortcuts(): void {
  showInfo(
    "Keyboard shortcuts",
    <table class="shortcuts">
      <tbody>
        {SHORTCUTS.map(([keys, what]) => (
          <tr key={keys}>
            <th scope="row">{keys.split("+").map((k, i) => <>{i > 0 && "+"}<kbd>{k}</kbd></>)}</th>
            <td>{what}</td>
          </tr>
        ))}
      </tbody>
    </table>,
  );
}

/** Where typing goes to a field, single keys are text, not shortcuts. */
function typing(target: EventTarget | null): boolean {
  const el = target as HTMLElement | null;
  return !!el && (el.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(el.tagName));
}

/** Page-wide keys; `search` focuses the topic search (opening the drawer where it is one). */
export function installShortcuts(search: () => void): () => void {
  const onKey = (e: KeyboardEvent): void => {
    if (e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey || typing(e.target)) return;
    if (document.querySelector("dialog[open]")) return;
    if (e.key === "?") {
      e.preventDefault();
      showShortcuts();
    } else if (e.key === "/") {
      e.preventDefault();
      search();
    }
  };
  document.addEventListener("keydown", onKey);
  return () => document.removeEventListener("keydown", onKey);
}
