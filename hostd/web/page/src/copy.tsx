/**
 * Copy to the clipboard: a message's text (its button) and a code block's (buttons inside the
 * rendered Markdown, handled by delegation: that HTML is a string, so it carries no handlers).
 */
import { useState } from "preact/hooks";

/** Copy `text`; the async clipboard API where the page is a secure context (127.0.0.1 is),
 * else the old selection copy (a desktop shell's web view may offer no clipboard API). */
export async function copyText(text: string): Promise<boolean> {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.append(area);
    area.select();
    const ok = document.execCommand("copy");
    area.remove();
    return ok;
  }
}

/** A code block's button says "Copied" for a moment (it lives in Markdown HTML, not in
 * Preact's tree, so it is changed directly). */
function flash(button: HTMLElement, ok: boolean): void {
  const label = button.dataset.label ?? button.textContent ?? "Copy";
  button.dataset.label = label;
  button.textContent = ok ? "Copied" : "Copy failed";
  setTimeout(() => {
    button.textContent = label;
  }, 1500);
}

export function CopyButton({ text, what }: { text: () => string; what: string }) {
  const [shown, setShown] = useState("Copy");
  return (
    <button type="button" class="ghost small copy" aria-label={`Copy ${what}`} data-testid="copy"
      onClick={async () => {
        setShown((await copyText(text())) ? "Copied" : "Copy failed");
        setTimeout(() => setShown("Copy"), 1500);
      }}>
      {shown}
    </button>
  );
}

/** Click handler for rendered Markdown: a code block's copy button copies its code. */
export function onCodeCopy(e: MouseEvent): void {
  const button = (e.target as Element).closest?.("button.copy-code");
  if (!(button instanceof HTMLElement)) return;
  const code = button.parentElement?.querySelector("pre code");
  if (code) void copyText(code.textContent ?? "").then((ok) => flash(button, ok));
}
