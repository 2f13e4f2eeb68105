/**
 * What image an attachment's bytes are, by their signature: the same rule as Python's
 * `hostd_protocol.common.image_type_of`, which the daemon applies to every `send` (an image
 * whose bytes are not its declared `media_type` is refused, nothing stored). A file's own
 * type comes from its name and may lie; tell it from the bytes instead.
 */
import type { Attachment } from "./protocol.gen.js";

/** The image type of base64 `data` (only its first characters are read), or null. */
export function imageTypeOf(data: string): Attachment["media_type"] | null {
  let head: string;
  try {
    head = atob(data.slice(0, 16));
  } catch {
    return null;
  }
  if (head.startsWith("\x89PNG\r\n\x1a\n")) return "image/png";
  if (head.startsWith("\xff\xd8\xff")) return "image/jpeg";
  if (head.startsWith("GIF87a") || head.startsWith("GIF89a")) return "image/gif";
  if (head.startsWith("RIFF") && head.slice(8, 12) === "WEBP") return "image/webp";
  return null;
}
