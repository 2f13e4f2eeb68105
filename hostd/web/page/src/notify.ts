/**
 * Desktop notifications while the page is in a background tab: an answer finished (or
 * stopped, or failed), or an approval waits. Off until the user turns them on (the browser
 * asks for permission then, on that click); the choice is kept in localStorage.
 */
import type { SubscriptionItem, TopicInfo } from "hostd-client";

const KEY = "hostd-notify";

export function notifySupported(): boolean {
  // Inside `hostd app` (a page loaded from a file) the app shows native notifications itself.
  return typeof Notification !== "undefined" && window.location.protocol !== "file:";
}

export function notifyWanted(): boolean {
  return notifySupported() && localStorage.getItem(KEY) === "on" && Notification.permission === "granted";
}

/** Turn notifications on (asking the browser) or off; resolves with the new state. */
export async function setNotify(on: boolean): Promise<boolean> {
  if (!on || !notifySupported()) {
    localStorage.removeItem(KEY);
    return false;
  }
  const permission = Notification.permission === "granted" ? "granted" : await Notification.requestPermission();
  if (permission !== "granted") return false;
  localStorage.setItem(KEY, "on");
  return true;
}

/** What to say for one event of the open topic, or null (most events say nothing). */
export function notificationFor(item: SubscriptionItem, topic?: TopicInfo): { title: string; body: string } | null {
  const name = topic?.title || "hostd";
  if (item.type === "turn-ended") {
    const body = item.status === "success" ? "The answer is finished." : item.status === "stopped" ? "The answer was stopped." : `The answer failed: ${item.error ?? ""}`;
    return { title: name, body };
  }
  if (item.type === "approval-requested") {
    const a = item.approval;
    return { title: `${name}: approval needed`, body: `Allow ${a.tool}? ${a.description ?? ""}`.trim() };
  }
  return null;
}

/** Show it when the page is hidden (a visible page shows the same thing already). */
export function maybeNotify(item: SubscriptionItem, topic?: TopicInfo): void {
  if (document.visibilityState !== "hidden" || !notifyWanted()) return;
  const what = notificationFor(item, topic);
  if (what === null) return;
  const n = new Notification(what.title, { body: what.body, tag: `hostd-${topic?.id ?? ""}` });
  n.onclick = () => {
    window.focus();
    n.close();
  };
}
