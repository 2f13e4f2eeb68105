"""`python -m hostd_dev.bench.app_probe HOME TOPIC ROWS`: one `hostd app` window (the App
object the command runs) that reports, as one JSON line on stdout, when its page painted first
and when it showed the topic's ROWS rows, then stays open until stdin closes (the bench
measures its memory meanwhile). Times are wall-clock epoch milliseconds."""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

from hostd.app.main import App
from hostd.shell.paths import Paths

#: Resolves once the page shows `rows` rows and its first contentful paint is recorded (the
#: Paint Timing entry comes after the paint; rows may be shown first): both as epoch ms.
SHOWN_JS = """new Promise((resolve) => {
  let shown = 0;
  const tick = () => {
    if (!shown && document.querySelectorAll('[data-testid=row]').length >= %d)
      shown = performance.timeOrigin + performance.now();
    const fcp = performance.getEntriesByName('first-contentful-paint')[0];
    if (shown && fcp) resolve({shown, fcp: performance.timeOrigin + fcp.startTime});
    else requestAnimationFrame(tick);
  };
  tick();
})"""


def main() -> None:
    home, topic, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
    app = App(Paths.under(home), notify=lambda title, body: None)

    def probe(app: App) -> None:
        done = threading.Event()
        result: list[Any] = []

        def got(value: Any) -> None:
            result.append(value)
            done.set()

        app.windows[0].evaluate_js(SHOWN_JS % rows, got)
        done.wait(120)
        print(json.dumps(result[0] if result else {"error": "no answer"}), flush=True)
        sys.stdin.read()  # the bench measures memory, then closes stdin
        for w in list(app.windows):
            w.destroy()

    app.run(topic, on_started=lambda a: threading.Thread(target=probe, args=(a,), daemon=True).start())


if __name__ == "__main__":
    main()
