"""The blocking face of `Client`: the same requests, called without `await`.

::

    with SyncClient(autostart=True) as client:
        topic = client.create_topic(title="demo")
        client.send(topic.id, "hello")
        print(client.history(topic.id).rows)

Rules this module guards:

- One client, two faces (as httpcore derives its sync API from its async one): every request
  method here is `blocking(Client.<name>)`, a function made from the async method. It has the
  async method's signature, docstring and return type (mypy sees them through `ParamSpec`),
  and its body is one `_call`: the method runs on the async client, in the trio thread this
  object holds. No request logic lives here, so the two cannot drift;
  tests/client/test_sync_client.py checks that every public request of `Client` has its twin.
- `attach` is not offered: a subscription is an async iterator fed by the connection's reader
  task (use `open_client` for live events).
- Errors are the async client's, raised in the caller's thread (`HostdError` subclasses);
  a call after `close()` raises `ConnectionClosed`.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Concatenate, ParamSpec, TypeVar

import trio

from hostd.client.async_client import Client, open_client
from hostd.client.sync_wire import ClosingContext
from hostd.shell.paths import Paths
from hostd_protocol.errors import ConnectionClosed, HostdError

__all__ = ["SyncClient", "blocking"]

P = ParamSpec("P")
R = TypeVar("R")


def blocking(
    method: Callable[Concatenate[Client, P], Awaitable[R]],
) -> Callable[Concatenate[SyncClient, P], R]:
    """The blocking twin of an async `Client` method: same parameters, docstring and return
    type (`functools.wraps` keeps `inspect.signature` and `help()` exact)."""

    @functools.wraps(method)
    def call(self: SyncClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._call(method, *args, **kwargs)

    call.__qualname__ = f"SyncClient.{method.__name__}"
    call.__module__ = __name__
    return call


class SyncClient(ClosingContext):
    """One connection to the daemon for blocking code: a trio thread holds it.

    Each request method is the async `Client`'s, called without `await` (see the module
    docstring). `with SyncClient(...) as client:` closes it at the end.
    """

    def __init__(
        self,
        paths: Paths | None = None,
        *,
        home: str | os.PathLike[str] | None = None,
        autostart: bool = False,
        client_name: str = "hostd-sync-client",
    ) -> None:
        self._paths = paths or Paths.from_env(home)
        self._autostart = autostart
        self._client_name = client_name
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._client: Client | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._main, name="hostd-sync-client", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error

    def _main(self) -> None:
        async def run() -> None:
            try:
                async with open_client(
                    self._paths, client_name=self._client_name, autostart=self._autostart
                ) as client:
                    self._client = client
                    self._token = trio.lowlevel.current_trio_token()
                    self._stop = trio.Event()
                    self._ready.set()
                    await self._stop.wait()
            except BaseException as exc:
                self._error = exc
                self._ready.set()
                if not isinstance(exc, HostdError | OSError):
                    raise

        try:
            trio.run(run)
        except BaseException:  # already recorded in self._error for the caller
            pass

    def _call(
        self,
        method: Callable[Concatenate[Client, P], Awaitable[R]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> R:
        """Run `method(client, *args, **kwargs)` in the client's trio thread; block until it
        returns (or raises)."""
        client, token = self._client, self._token
        if self._closed or client is None or token is None:
            raise ConnectionClosed("the client closed the connection")
        return trio.from_thread.run(
            functools.partial(method, client, *args, **kwargs), trio_token=token
        )

    def close(self) -> None:
        """Close the connection and end the trio thread (idempotent)."""
        self._closed = True
        if self._stop is not None and self._token is not None and self._thread.is_alive():
            stop = self._stop
            try:
                trio.from_thread.run_sync(stop.set, trio_token=self._token)
            except trio.RunFinishedError:
                pass  # the thread ended by itself in between
        self._thread.join()

    # --- requests: the async client's, blocking (one line each; see `blocking`) ----------

    create_topic = blocking(Client.create_topic)
    list_topics = blocking(Client.list_topics)
    read_row = blocking(Client.read_row)
    all_rows = blocking(Client.all_rows)
    get_topic = blocking(Client.get_topic)
    rename_topic = blocking(Client.rename_topic)
    delete_topic = blocking(Client.delete_topic)
    send = blocking(Client.send)
    continue_turn = blocking(Client.continue_turn)
    usage = blocking(Client.usage)
    stop = blocking(Client.stop)
    answer_approval = blocking(Client.answer_approval)
    edit_queued = blocking(Client.edit_queued)
    discard_queued = blocking(Client.discard_queued)
    send_now = blocking(Client.send_now)
    prewarm = blocking(Client.prewarm)
    history = blocking(Client.history)
    status = blocking(Client.status)
    list_drivers = blocking(Client.list_drivers)
    list_assistants = blocking(Client.list_assistants)
    ping = blocking(Client.ping)
    shutdown = blocking(Client.shutdown)
    # schedules
    add_schedule = blocking(Client.add_schedule)
    list_schedules = blocking(Client.list_schedules)
    remove_schedule = blocking(Client.remove_schedule)
    pause_schedule = blocking(Client.pause_schedule)
    resume_schedule = blocking(Client.resume_schedule)
    run_schedule_now = blocking(Client.run_schedule_now)
    # topic operations (`topic_ops.TopicOps`)
    rewind = blocking(Client.rewind)
    regenerate = blocking(Client.regenerate)
    edit_resend = blocking(Client.edit_resend)
    fork_topic = blocking(Client.fork_topic)
    history_all = blocking(Client.history_all)
    choose_answer = blocking(Client.choose_answer)
