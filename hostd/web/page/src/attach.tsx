/**
 * Files sent with a message (protocol 1.5): images go as attachments (base64; drivers whose
 * vendor takes images pass them on), text files are put into the message as fenced blocks
 * (every driver reads text). Added with the Attach button, by pasting or by dropping files on
 * the composer; shown as chips (a thumbnail, the name, ✕) until sent.
 */
import { imageTypeOf, type Attachment } from "hostd-client";

const IMAGE_TYPES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);
/** What the daemon takes with one message, base64 characters (`MAX_ATTACHMENT_BYTES`). */
export const MAX_ATTACHMENT_CHARS = 2 * 1024 * 1024;
const MAX_TEXT_FILE = 256 * 1024;

export interface Picked {
  images: Attachment[];
  /** Text files, as fenced blocks for the message. */
  texts: string[];
  /** One line per file that was not taken, and why. */
  refused: string[];
}

function base64Of(file: File): Promise<string> {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).split(",", 2)[1] ?? "");
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

function looksLikeText(file: File): boolean {
  return file.type.startsWith("text/") || /\.(md|txt|py|ts|tsx|js|json|toml|ya?ml|sh|rs|go|c|h|cpp|java|csv|log|diff|patch)$/i.test(file.name);
}

/** Read `files`: images within `budget` base64 characters, text files, the rest refused. */
/** Picks what can go with a message; `noImages`: why images cannot (the topic's driver). */
export async function pickFiles(files: Iterable<File>, budget: number, noImages = ""): Promise<Picked> {
  const out: Picked = { images: [], texts: [], refused: [] };
  for (const file of files) {
    if (IMAGE_TYPES.has(file.type) && noImages) {
      out.refused.push(`${file.name}: ${noImages}`);
    } else if (IMAGE_TYPES.has(file.type)) {
      const data = await base64Of(file);
      const mediaType = imageTypeOf(data);
      if (mediaType === null) {
        out.refused.push(`${file.name}: not a PNG, JPEG, GIF or WebP image (told by its first bytes)`);
        continue;
      }
      if (data.length > budget) {
        out.refused.push(`${file.name}: too big (images go up to 1.5 MB in all with one message)`);
        continue;
      }
      budget -= data.length;
      out.images.push({ media_type: mediaType, data, name: file.name || "pasted image" });
    } else if (looksLikeText(file) && file.size <= MAX_TEXT_FILE) {
      const text = await file.text();
      out.texts.push(`${file.name}:\n\`\`\`\n${text.replace(/\n$/, "")}\n\`\`\``);
    } else {
      out.refused.push(`${file.name}: only images (PNG, JPEG, GIF, WebP) and text files up to 256 KB can be attached`);
    }
  }
  return out;
}

export function AttachmentChips({ images, remove, label = "Attachments" }: {
  images: Attachment[];
  remove?: (i: number) => void;
  label?: string;
}) {
  if (images.length === 0) return null;
  return (
    <ul class="attachments" aria-label={label}>
      {images.map((a, i) => (
        <li key={i} class="attachment" data-testid="attachment">
          <img src={`data:${a.media_type};base64,${a.data}`} alt={a.name || "image"} />
          <span class="attachment-name">{a.name}</span>
          {remove && (
            <button type="button" class="ghost small" aria-label={`Remove ${a.name || "image"}`} onClick={() => remove(i)}>✕</button>
          )}
        </li>
      ))}
    </ul>
  );
}

/** The images stored with a user row (`meta.attachments`). */
export function attachmentsOf(meta: Record<string, unknown> | undefined): Attachment[] {
  const list = meta?.attachments;
  return Array.isArray(list) ? (list.filter((a) => a && typeof a === "object" && "data" in a) as Attachment[]) : [];
}
