/**
 * Where the daemon's socket is, computed the way the daemon computes it
 * (`hostd/shell/paths.py`), so a Node client finds it without Python.
 *
 * - `HOSTD_HOME=<dir>` (or `home`): `<dir>/run/hostd.sock`.
 * - Linux and other Unixes: `$XDG_RUNTIME_DIR/hostd/hostd.sock` when XDG_RUNTIME_DIR is an
 *   absolute directory owned by you with mode 0700; else `/run/user/<uid>/hostd/hostd.sock`
 *   when that directory is yours; else `<tmpdir>/hostd-<uid>/hostd.sock` (a private folder
 *   per user, as tmux does: `hostd.shell.paths.default_runtime_dir`).
 * - macOS: `~/Library/Caches/TemporaryItems/hostd/hostd.sock`.
 *
 * When in doubt, `hostd status` prints the path the daemon really uses.
 */
import { statSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { isAbsolute, join, resolve } from "node:path";

export const SOCKET_NAME = "hostd.sock";
export const HOME_ENV = "HOSTD_HOME";

function ownedPrivateDir(path: string, requireMode: boolean): boolean {
  try {
    const st = statSync(path);
    if (!st.isDirectory()) return false;
    if (process.getuid !== undefined && st.uid !== process.getuid()) return false;
    return !requireMode || (st.mode & 0o777) === 0o700;
  } catch {
    return false;
  }
}

/** The daemon's runtime dir (socket and lock) for `home`, else `$HOSTD_HOME`, else the platform's. */
export function runtimeDir(home?: string, env: NodeJS.ProcessEnv = process.env): string {
  const root = home || env[HOME_ENV];
  if (root) return join(resolve(root.replace(/^~(?=$|\/)/, homedir())), "run");
  if (process.platform === "darwin") return join(homedir(), "Library", "Caches", "TemporaryItems", "hostd");
  const uid = process.getuid?.() ?? 0;
  const xdg = env["XDG_RUNTIME_DIR"];
  if (xdg && isAbsolute(xdg) && ownedPrivateDir(xdg, true)) return join(xdg, "hostd");
  const base = process.platform.startsWith("freebsd") || process.platform.startsWith("netbsd")
    ? `/var/run/user/${uid}`
    : process.platform.startsWith("openbsd")
      ? `/tmp/run/user/${uid}`
      : `/run/user/${uid}`;
  if (ownedPrivateDir(base, false)) return join(base, "hostd");
  return join(tmpdir(), `hostd-${uid}`);
}

/** The daemon's socket path (see the module comment for the rules). */
export function socketPath(home?: string, env: NodeJS.ProcessEnv = process.env): string {
  return join(runtimeDir(home, env), SOCKET_NAME);
}
