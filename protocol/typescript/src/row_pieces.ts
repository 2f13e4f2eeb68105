/**
 * Reading one stored row whole through `read-row`, whose pieces are bounded in bytes.
 *
 * Rules this module guards:
 *
 * - Pieces come in order; a piece that starts inside a part (`offset` > 0) continues the last
 *   part of the previous piece, and the two are joined (text, thinking, tool output).
 * - Every piece moves the position (`next_part`, `next_offset`) forward, or the read fails
 *   with `ProtocolError` instead of looping.
 */
import { ProtocolError } from "./errors.js";
import type { RowContent } from "./protocol.gen.js";
import type { Chunk } from "./types.js";

/** Ask for the piece of the row that starts at (`part`, `offset`). */
export type FetchPiece = (part: number, offset: number) => Promise<RowContent>;

/** The row's parts from its start, read piece by piece with `fetch`, pieces joined. */
export async function readPieces(fetch: FetchPiece, rowId: string): Promise<Chunk[]> {
  const parts: Chunk[] = [];
  let part = 0;
  let offset = 0;
  for (;;) {
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
