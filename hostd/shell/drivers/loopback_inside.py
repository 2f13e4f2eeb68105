"""The sandbox's half of the loopback bridge: run as the first process inside bubblewrap.

    python -I -m hostd.shell.drivers.loopback_inside DIR PORT[=NAME][,...] -- DRIVER ARGV...

A sandbox with `network = "loopback"` has its own network namespace: its `127.0.0.1` is not
the host's. For each declared PORT this listens on the sandbox's `127.0.0.1:PORT` and relays
every connection to the Unix socket `DIR/PORT.sock`, which the daemon bound into the sandbox
and relays to the host's `127.0.0.1:PORT` (`hostd.shell.drivers.loopback_bridge`); with
`=NAME`, to `DIR/NAME.sock` instead (the daemon's credential proxy,
`hostd.shell.drivers.credential_proxy`). Nothing else of the host's network is reachable. Then it runs the driver as its child (stdin, stdout
and stderr inherited: the frames pass straight through) and exits with the child's code.

Standard library only, threads: it starts before the driver and must not slow it down.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading

from hostd_protocol import child_process

BUFFER = 65536


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(BUFFER):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (dst, src):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _serve(listener: socket.socket, target: str) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(target)
        except OSError:
            client.close()
            upstream.close()
            continue
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: loopback_inside DIR PORT[=NAME][,...] -- ARGV...", file=sys.stderr)
        return 2
    folder, ports, command = argv[0], argv[1], argv[3:]
    for entry in (p for p in ports.split(",") if p):
        number, _, name = entry.partition("=")
        port = int(number)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
        target = os.path.join(folder, f"{name or port}.sock")
        threading.Thread(target=_serve, args=(listener, target), daemon=True).start()
    # Dies with this forwarder (the sandbox's pid namespace ends with it anyway).
    child = child_process.popen(command, pdeathsig=signal.SIGKILL, new_session=False)
    while True:
        try:
            return child.wait()
        except KeyboardInterrupt:  # pragma: no cover - the sandbox has no terminal
            continue


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(code if code >= 0 else 128 - code)
