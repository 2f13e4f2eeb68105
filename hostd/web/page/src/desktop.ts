/**
 * The page inside `hostd app` (a pywebview window loading it from a file): its transport is
 * pywebview's JS-to-Python bridge instead of a WebSocket, one daemon socket connection per
 * window, held by the Python side (hostd/app/bridge.py). There is no URL, no token and no TCP
 * listener: the daemon's usual peer-uid check applies to the app's own process.
 *
 * The transport is hostd-client's `BridgeTransport`; this file wires it to pywebview: frames go
 * out through `pywebview.api.send(conn, body)` (chained by the transport, so they reach the
 * socket in order even though pywebview serves each call on its own thread) and come in as
 * `window.__hostdBridge.frames(conn, bodies)` calls the Python side evaluates in the page.
 */
import { BridgeTransport, type SubscriptionItem, type TopicInfo, type Transport } from "hostd-client";

import { notificationFor } from "./notify";

/** What hostd/app/bridge.py exposes as `window.pywebview.api`. */
interface DesktopApi {
  connect(): Promise<number>;
  send(conn: number, body: string): Promise<void>;
  close(conn: number): Promise<void>;
  open_window(topic: string): Promise<void>;
  notify(title: string, body: string): Promise<void>;
}

interface BridgeSink {
  frames(conn: number, bodies: string[]): void;
  closed(conn: number, reason: string): void;
}

type DesktopWindow = Window & { pywebview?: { api: DesktopApi }; __hostdBridge?: BridgeSink };

const win = window as DesktopWindow;

/** Whether this page runs inside `hostd app` (loaded from a file, not from the gateway). */
export function inDesktopApp(): boolean {
  return window.location.protocol === "file:";
}

/** pywebview's API object, once pywebview injected it (after the page loaded). */
function api(): Promise<DesktopApi> {
  const ready = win.pywebview?.api;
  if (ready && typeof ready.connect === "function") return Promise.resolve(ready);
  return new Promise((resolve) => {
    window.addEventListener("pywebviewready", () => resolve(win.pywebview!.api), { once: true });
  });
}

const open = new Map<number, BridgeTransport>();

win.__hostdBridge = {
  frames(conn, bodies) {
    const t = open.get(conn);
    if (t !== undefined) for (const body of bodies) t.deliver(body);
  },
  closed(conn, reason) {
    open.get(conn)?.end(reason);
    open.delete(conn);
  },
};

/** A new daemon connection for this window (the Python side opens the Unix socket). */
export async function connectDesktop(): Promise<Transport> {
  const bridge = await api();
  const conn = await bridge.connect();
  const t = new BridgeTransport({
    send: (body) => bridge.send(conn, body),
    close: () => {
      open.delete(conn);
      return bridge.close(conn);
    },
  });
  open.set(conn, t);
  return t;
}

/** "Open in new window": another window of the app on `topic`. */
export function openWindow(topic: string): void {
  void api().then((a) => a.open_window(topic));
}

/** A native notification (the desktop's, through the app) for an event of the open topic,
 * when this window does not have the focus. */
export function desktopNotify(item: SubscriptionItem, topic?: TopicInfo): void {
  if (!inDesktopApp() || document.hasFocus()) return;
  const what = notificationFor(item, topic);
  if (what !== null) void api().then((a) => a.notify(what.title, what.body));
}
