/**
 * Reading one stored row whole through `read-row`, whose pieces are bounded in bytes.
 *
 * Rules this module guards:
 *
 * - Pieces come in order; a piece that starts inside a part (`offset` > 0) continues the last
 *   part of the previous piece, and the two are joined (text, thinking, tool output).
 * - Every piece moves the position (`next_part`, `next_offset`) forward, or the read fails
 *   with `ProtocolError` instead of looping.
 * - Positions count characters as the daemon does (Unicode code points, not UTF-16 units).
 * - A row delivered cut (`meta.truncated = {omitted_parts: n, omitted_chars: m}`: its first n
 *   parts and m characters of part n left out) is made whole by reading only what was left
 *   out (`readHead`) and putting it in front of what the window has (`withHead`): the rest
 *   may still be growing (a live answer), the omitted head no longer changes.
 */
import { ProtocolError } from "./errors.js";
import type { MessageRow, RowContent } from "./protocol.gen.js";
import type { Chunk } from "./types.js";

/** Ask for the piece of the row that starts at (`part`, `offset`). */
export type FetchPiece = (part: number, offset: number) => Promise<RowContent>;

/** `MessageRow.meta` key of a row delivered without its oldest content (`TRUNCATED_META`). */
export const TRUNCATED_META = "truncated";

/** Where a cut row's kept content starts: the first `part` parts and `chars` characters of
 * part `part` were left out. */
export interface Omitted {
  readonly part: number;
  readonly chars: number;
}

/** What `row` left out (`meta.truncated`), or null when it is whole. */
export function omittedOf(row: MessageRow): Omitted | null {
  const cut = row.meta?.[TRUNCATED_META] as { omitted_parts?: unknown; omitted_chars?: unknown } | undefined;
  if (cut === undefined || cut === null || typeof cut !== "object") return null;
  const part = typeof cut.omitted_parts === "number" ? cut.omitted_parts : 0;
  const chars = typeof cut.omitted_chars === "number" ? cut.omitted_chars : 0;
  return part > 0 || chars > 0 ? { part, chars } : null;
}

/** The row's parts from its start, read piece by piece with `fetch`, pieces joined. */
export function readPieces(fetch: FetchPiece, rowId: string): Promise<Chunk[]> {
  return readUntil(fetch, rowId);
}

/**
 * What a cut row left out (`omitted`), read with `fetch`; null when the stored row does not
 * reach that far (it is not stored yet, or changed).
 */
export async function readHead(fetch: FetchPiece, rowId: string, omitted: Omitted): Promise<Chunk[] | null> {
  return headOf(await readUntil(fetch, rowId, omitted), omitted);
}

async function readUntil(fetch: FetchPiece, rowId: string, until?: Omitted): Promise<Chunk[]> {
  const parts: Chunk[] = [];
  let part = 0;
  let offset = 0;
  for (;;) {
    if (until !== undefined && (part > until.part || (part === until.part && offset >= until.chars))) {
      return parts;
    }
    const r = await fetch(part, offset);
    r.parts.forEach((piece, i) => {
      const last = parts[parts.length - 1];
      if (i === 0 && offset && last !== undefined) parts[parts.length - 1] = joinPieces(last, piece);
      else parts.push(piece);
    });
    if (r.done ?? true) return parts;
    const nextPart = r.next_part ?? 0;
    const nextOffset = r.next_offset ?? 0;
    if (nextPart < part || (nextPart === part && nextOffset <= offset)) {
      throw new ProtocolError(`read-row of ${rowId} made no progress at ${part}:${offset}`);
    }
    part = nextPart;
    offset = nextOffset;
  }
}

/**
 * `head` (what a cut row left out, from `readPieces(..., until)`) in front of `rest` (the parts
 * the window holds, which start `omitted.chars` characters into part `omitted.part`).
 */
export function withHead(head: readonly Chunk[], rest: readonly Chunk[], omitted: Omitted): Chunk[] {
  const first = rest[0];
  const last = head[head.length - 1];
  if (omitted.chars > 0 && first !== undefined && last !== undefined) {
    return [...head.slice(0, -1), joinPieces(last, first), ...rest.slice(1)];
  }
  return [...head, ...rest];
}

/** The first `until.part` parts, then `until.chars` characters of the next one; null when
 * `parts` is shorter than that. */
function headOf(parts: readonly Chunk[], until: Omitted): Chunk[] | null {
  const head = parts.slice(0, until.part);
  if (head.length < until.part) return null;
  if (until.chars === 0) return head;
  const cut = parts[until.part];
  const text = cut === undefined ? undefined : cut.type === "tool-result" ? cut.output : "text" in cut ? cut.text : undefined;
  if (cut === undefined || text === undefined) return null;
  const piece = codePointSlice(text, until.chars);
  if (codePointLength(piece) < until.chars) return null;
  head.push(cut.type === "tool-result" ? { ...cut, output: piece } : { ...cut, text: piece } as Chunk);
  return head;
}

function codePointLength(text: string): number {
  let n = 0;
  for (const _ of text) n += 1;
  return n;
}

/** The first `n` code points of `text` (the daemon counts characters as code points). */
function codePointSlice(text: string, n: number): string {
  let units = 0;
  let points = 0;
  while (points < n && units < text.length) {
    const code = text.charCodeAt(units);
    units += code >= 0xd800 && code <= 0xdbff && units + 1 < text.length ? 2 : 1;
    points += 1;
  }
  return text.slice(0, units);
}

/** One part delivered in two `read-row` pieces, whole again. */
function joinPieces(head: Chunk, tail: Chunk): Chunk {
  if (head.type === "text" && tail.type === "text") return { type: "text", text: head.text + tail.text };
  if (head.type === "thinking" && tail.type === "thinking") {
    return { type: "thinking", text: head.text + tail.text };
  }
  if (head.type === "tool-result" && tail.type === "tool-result") {
    return { ...head, output: head.output + tail.output };
  }
  throw new ProtocolError("read-row continued a part with a part of another kind");
}
