/**
 * Markdown for answers: marked (GFM) + highlight.js core with a few registered languages.
 *
 * Agent output is untrusted text shown in a page that holds a live daemon connection, so raw
 * HTML in it is escaped (never rendered), and links keep only http(s)/mailto targets.
 */
import hljs from "highlight.js/lib/core";
import bash from "highlight.js/lib/languages/bash";
import json from "highlight.js/lib/languages/json";
import python from "highlight.js/lib/languages/python";
import typescript from "highlight.js/lib/languages/typescript";
import javascript from "highlight.js/lib/languages/javascript";
import diff from "highlight.js/lib/languages/diff";
import { Marked, type Tokens } from "marked";

hljs.registerLanguage("bash", bash);
hljs.registerLanguage("sh", bash);
hljs.registerLanguage("json", json);
hljs.registerLanguage("python", python);
hljs.registerLanguage("py", python);
hljs.registerLanguage("typescript", typescript);
hljs.registerLanguage("ts", typescript);
hljs.registerLanguage("javascript", javascript);
hljs.registerLanguage("js", javascript);
hljs.registerLanguage("diff", diff);

export function escapeHtml(text: string): string {
  return text
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(/'/g, "&#39;");
}

const SAFE_URL = /^(https?:|mailto:|#)/i;

/**
 * The renderer, with or without syntax highlighting. While an answer streams it is drawn again
 * at every frame, and highlighting a long code block makes thousands of elements each time
 * (an 80k-character Python block froze the page for seconds): the streaming answer's code is
 * shown plain, and highlighted once the answer is finished.
 */
function makeMarked(highlight: boolean): Marked {
  return new Marked({
    gfm: true,
    breaks: false,
    renderer: {
      html(token: Tokens.HTML | Tokens.Tag): string {
        return escapeHtml(token.text);
      },
      code(token: Tokens.Code): string {
        const lang = (token.lang ?? "").trim().split(/\s+/)[0] ?? "";
        const body =
          highlight && lang && hljs.getLanguage(lang)
            ? hljs.highlight(token.text, { language: lang, ignoreIllegals: true }).value
            : escapeHtml(token.text);
        const cls = lang ? ` language-${escapeHtml(lang)}` : "";
        // tabindex: a scrolling block must be reachable by keyboard; the button copies it.
        return `<div class="code-block"><button type="button" class="ghost small copy-code" aria-label="Copy code">Copy</button>`
          + `<pre class="code" tabindex="0"><code class="hljs${cls}">${body}</code></pre></div>`;
      },
      link(token: Tokens.Link): string {
        const text = this.parser.parseInline(token.tokens);
        if (!SAFE_URL.test(token.href)) return text;
        return `<a href="${escapeHtml(token.href)}" target="_blank" rel="noopener noreferrer">${text}</a>`;
      },
      image(token: Tokens.Image): string {
        return escapeHtml(token.text || token.href);
      },
    },
  });
}

const highlighted = makeMarked(true);
const plain = makeMarked(false);

/** HTML for one answer's text (safe to put in innerHTML); code highlighted unless `streaming`. */
export function renderMarkdown(text: string, streaming = false): string {
  return (streaming ? plain : highlighted).parse(text, { async: false }) as string;
}
