/**
 * Modal dialogs on the native `<dialog>` element: `showModal()` gives the focus trap, Esc to
 * close, the inert page behind and the `dialog` role with `aria-modal`, so nothing here
 * re-implements them. Used instead of `window.prompt`/`confirm` (unstyled, unlabelled, and
 * blocking the page's event loop while open: a streaming answer froze behind them).
 */
import type { ComponentChildren, VNode } from "preact";
import { useEffect, useId, useRef, useState } from "preact/hooks";

// One dialog at a time, drawn by `DialogHost` at the root of the page: a dialog drawn inside
// the element that opened it would vanish with it (a row's menu is hidden once the pointer
// leaves the row).
let setShown: ((dialog: VNode | null) => void) | null = null;
let serial = 0;

export function DialogHost() {
  const [dialog, setDialog] = useState<VNode | null>(null);
  useEffect(() => {
    setShown = setDialog;
    return () => {
      setShown = null;
    };
  }, []);
  return dialog;
}

function show(dialog: VNode | null): void {
  setShown?.(dialog);
}

export function Dialog({ title, onClose, children, wide = false }: {
  title: string;
  onClose: () => void;
  children: ComponentChildren;
  wide?: boolean;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  const id = useId();
  // Closing on unmount fires `close` later: by then the answer is given, so it is ignored.
  const live = useRef(true);
  useEffect(() => {
    const el = ref.current;
    if (el && !el.open) el.showModal();
    return () => {
      live.current = false;
      el?.close();
    };
  }, []);
  const close = () => live.current && onClose();
  return (
    <dialog ref={ref} class={wide ? "wide" : ""} aria-labelledby={id} onClose={close}
      onClick={(e) => e.target === ref.current && close()}>
      <h2 id={id}>{title}</h2>
      {children}
    </dialog>
  );
}

/** Ask for text; resolves with it (non-empty) or null when cancelled. */
export function askText(opts: { title: string; label: string; initial: string; submit: string; multiline?: boolean }): Promise<string | null> {
  return new Promise((resolve) => {
    const done = (text: string | null) => {
      show(null);
      resolve(text);
    };
    show(<TextDialog key={++serial} {...opts} onDone={done} />);
  });
}

/** Ask yes or no; resolves with the answer. */
export function askConfirm(opts: { title: string; message: ComponentChildren; confirm: string }): Promise<boolean> {
  return new Promise((resolve) => {
    const done = (yes: boolean) => {
      show(null);
      resolve(yes);
    };
    show(<ConfirmDialog key={++serial} {...opts} onDone={done} />);
  });
}

/** Show something to read (the keyboard shortcuts); Esc or Close dismisses it. */
export function showInfo(title: string, body: ComponentChildren): void {
  const close = () => show(null);
  show(
    <Dialog key={++serial} title={title} onClose={close}>
      {body}
      <div class="form-buttons">
        <button type="button" class="primary" autoFocus onClick={close}>Close</button>
      </div>
    </Dialog>,
  );
}

/** Ask for one line or a few lines of text (rename, edit and resend). */
function TextDialog({ title, label, initial, submit, multiline = false, onDone }: {
  title: string;
  label: string;
  initial: string;
  submit: string;
  multiline?: boolean;
  /** Called with the text (trimmed, non-empty) or null when cancelled. */
  onDone: (text: string | null) => void;
}) {
  const [text, setText] = useState(initial);
  const id = useId();
  const onInput = (e: Event) => setText((e.target as HTMLInputElement).value);
  return (
    <Dialog title={title} onClose={() => onDone(null)} wide={multiline}>
      <form method="dialog" onSubmit={(e) => {
        e.preventDefault();
        if (text.trim()) onDone(text);
      }}>
        <label for={id}>{label}</label>
        {multiline
          ? <textarea id={id} rows={6} value={text} onInput={onInput} autoFocus />
          : <input id={id} value={text} onInput={onInput} autoFocus />}
        <div class="form-buttons">
          <button type="submit" class="primary" disabled={!text.trim()}>{submit}</button>
          <button type="button" class="ghost" onClick={() => onDone(null)}>Cancel</button>
        </div>
      </form>
    </Dialog>
  );
}

/** Ask yes or no (delete); the safe answer has the focus. */
function ConfirmDialog({ title, message, confirm, onDone }: {
  title: string;
  message: ComponentChildren;
  confirm: string;
  onDone: (yes: boolean) => void;
}) {
  return (
    <Dialog title={title} onClose={() => onDone(false)}>
      <p>{message}</p>
      <div class="form-buttons">
        <button type="button" class="danger" onClick={() => onDone(true)}>{confirm}</button>
        <button type="button" class="ghost" autoFocus onClick={() => onDone(false)}>Cancel</button>
      </div>
    </Dialog>
  );
}
