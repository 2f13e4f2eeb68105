/** Shared test helpers: iterate a subscription until a condition, compare rows with history. */
import type { MessageRow, Subscription, SubscriptionItem } from "../src/index.js";

/** Items of `sub` up to and including the first one `stop` accepts. */
export async function until(
  sub: Subscription,
  stop: (item: SubscriptionItem) => boolean,
): Promise<SubscriptionItem[]> {
  const seen: SubscriptionItem[] = [];
  const signal = AbortSignal.timeout(60_000); // a hung test fails instead of blocking the suite
  for (;;) {
    const next = await sub.next({ signal });
    if (next.done) throw new Error(`subscription ended; saw ${seen.map((i) => i.type).join(", ")}`);
    seen.push(next.value);
    if (stop(next.value)) return seen;
  }
}

export const turnEnded = (item: SubscriptionItem): boolean => item.type === "turn-ended";

/** Rows as history compares them: without `updated_at` (events do not carry it), defaults filled. */
export function comparable(rows: readonly MessageRow[]): object[] {
  return rows.map((row) => {
    const { updated_at: _ignored, ...rest } = row;
    // Fields left out on the wire when they hold their default (a reducer may hold them set).
    return { parts: [], lane: 0, alternative: false, ...rest };
  });
}

/** The text of a row's `text` parts. */
export function textOf(row: MessageRow | undefined): string {
  return (row?.parts ?? []).map((p) => (p.type === "text" ? p.text : "")).join("");
}
