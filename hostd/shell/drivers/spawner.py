"""How a driver session's process is started: its `Init`, its environment (only what the
driver's spec names, plus its secrets), the sandbox its policy asks for (never unconfined
instead), its loopback bridge and credential proxy, and what its stderr and events are
redacted of.

The spawning half of `Supervisor` (`hostd.shell.drivers.supervisor`), mixed in: every process
is started in the supervisor's nursery and reports its turns and its end to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from hostd.core.options import SessionOptions, merge_options
from hostd.core.redaction import credential_values
from hostd.core.sandbox_policy import (
    credential_port,
    driver_options,
    policy_of,
    proxies_credentials,
)
from hostd.shell.drivers.limits import Leaf
from hostd.shell.drivers.loopback_bridge import LoopbackBridge
from hostd.shell.drivers.pipe_hub import PipeHub
from hostd.shell.drivers.reaper import GroupReaper
from hostd.shell.drivers.sandbox import Sandbox
from hostd.shell.drivers.session import DriverSession, driver_env
from hostd.shell.drivers.window_options import (
    ConfiguredValues,
    check_window_options,
    folder_default,
)
from hostd_protocol.child_process import Limits
from hostd_protocol.common import PROTOCOL_VERSION, SessionSource
from hostd_protocol.driver_messages import Init
from hostd_protocol.driver_spec import DriverSpec, ProxiedCredential
from hostd_protocol.errors import DriverUnavailable, SandboxUnavailable

__all__ = ["SessionSpawner"]


class SessionSpawner:
    """Starting driver processes for `Supervisor` (a mixin: one concept, one module)."""

    _sandbox: Sandbox
    _bridges: dict[int, trio.CancelScope]
    _leaves: dict[int, Leaf]
    _nursery: trio.Nursery | None
    _base_env: dict[str, str]
    _handshake_timeout: float
    _close_timeout: float
    _terminate_timeout: float
    _max_frame_size: int
    _event_buffer: int
    _python: str | None
    _driver_nice: int
    _reaper: GroupReaper
    hub: PipeHub
    _spawned: int
    configured_values: ConfiguredValues
    report_model_calls: bool

    if TYPE_CHECKING:  # provided by Supervisor

        def _require_serving(self) -> trio.Nursery: ...

        def _on_turn_start(self, session: DriverSession) -> None: ...

        def _on_turn_end(self, session: DriverSession) -> None: ...

        def _on_end(self, session: DriverSession) -> None: ...

    async def _spawn(
        self,
        spec: DriverSpec,
        opts: SessionOptions,
        token: str | None,
        topic_id: str,
        fork_from: SessionSource | None = None,
    ) -> DriverSession:
        nursery = self._require_serving()
        # Checked at creation too; again here for what creation did not see (a topic stored
        # before the rule, a fork, an assistant file removed since).
        check_window_options(spec, opts.options, self.configured_values, self._base_env)
        init = Init(
            protocol_version=PROTOCOL_VERSION,
            model=opts.model,
            working_dir=opts.working_dir,
            resume_token=token,
            system_prompt=opts.system_prompt,
            options=driver_options(folder_default(spec, opts.options)),
            state_dir=opts.state_dir,
            fork_from=fork_from,
            report_model_calls=self.report_model_calls,
        )
        # `opts.secrets` holds the values of `${NAME}` references too (`Supervisor._resolve`):
        # this driver's environment only, never `init`.
        env = driver_env(spec.env_names(opts.options), self._base_env, opts.secrets)
        policy = policy_of(opts.options)
        proxied = await self._proxied(spec, env, opts) if proxies_credentials(policy) else None
        proxy = None
        if proxied is not None:
            # The key stays here: the sandbox gets a placeholder and the proxy's address.
            from hostd.shell.drivers.credential_proxy import CredentialProxy, ProxyTarget

            target = ProxyTarget(proxied.upstream, proxied.header, proxied.value)
            proxy = CredentialProxy(target)
            for name in proxied.remove_env:
                env.pop(name, None)
            env[proxied.key_env] = target.placeholder
            env[proxied.base_url_env] = f"http://127.0.0.1:{credential_port(policy)}"
        bridge: LoopbackBridge | None = None
        bridge_scope = trio.CancelScope()
        if policy.confined and ((policy.network == "loopback" and policy.ports) or proxy):
            # The session's own bridge to the declared ports of the host's loopback and its
            # credential proxy, for as long as the session lives (cancelled in `_on_end`, or
            # below if it never starts).
            bridge = LoopbackBridge(policy.ports, self._sandbox.bridge_parent, proxy)

            async def serve_bridge(task_status: trio.TaskStatus[None]) -> None:
                with bridge_scope:
                    await bridge.serve(task_status=task_status)

            await nursery.start(serve_bridge)
        leaf: Leaf | None = None
        limits: Limits | None = None
        try:
            # A fork reads its source's vendor files (read-only) to copy the session.
            source = fork_from.state_dir if fork_from is not None else ""
            argv = await self._sandboxed(
                spec, opts, env, bridge.folder if bridge else "", (source,) if source else (),
                proxied,
            )
            if policy.confined:
                # The whole confined tree shares one budget (`limits`).
                sandbox = self._sandbox
                argv, leaf, limits = await trio.to_thread.run_sync(sandbox.limit, argv, policy)
        except BaseException:
            bridge_scope.cancel()
            raise
        session = DriverSession(
            driver=opts.driver,
            argv=argv,
            init=init,
            env=env,
            cwd=opts.working_dir or None,
            topic_id=topic_id,
            handshake_timeout=self._handshake_timeout,
            close_timeout=self._close_timeout,
            terminate_timeout=self._terminate_timeout,
            max_frame_size=self._max_frame_size,
            event_buffer=self._event_buffer,
            # Every text this driver sends back is redacted of these (`hostd.core.redaction`):
            # the session's secrets, the credential-like variables its spec names, and the
            # variable an option names (`env_options`: an API key by construction).
            reaper=self._reaper,
            hub=self.hub,
            nice=self._driver_nice,
            limits=limits,
            redact=[
                *opts.secrets.values(),
                *credential_values(spec.env, self._base_env),
                *(
                    self._base_env.get(name, "")
                    for name in spec.env_names(opts.options)
                    if name not in spec.env
                ),
                # A key the spec's function found in a file (a Console key).
                *((proxied.value,) if proxied is not None else ()),
            ],
        )
        session.on_turn_start = self._on_turn_start
        session.on_turn_end = self._on_turn_end
        session.on_end = self._on_end
        session.check_send = partial(self._check_send, spec, opts.options)
        if bridge is not None:
            self._bridges[id(session)] = bridge_scope
        if leaf is not None:
            self._leaves[id(session)] = leaf
        self._spawned += 1
        try:
            started: DriverSession = await nursery.start(session.run)
        except BaseException:
            self._bridges.pop(id(session), None)
            bridge_scope.cancel()
            self._release_leaf(session)
            raise
        return started

    def _check_send(
        self, spec: DriverSpec, own: Mapping[str, Any], options: Mapping[str, Any]
    ) -> None:
        """A message's options over the session's: what a window may set (`window_options`)."""
        merged = merge_options(own, options)
        check_window_options(spec, merged, self.configured_values, self._base_env)

    def _release_leaf(self, session: DriverSession) -> None:
        """The session's tree is gone: its cgroup leaf goes too, in a thread (rmdir waits
        for killed members to finish exiting), shielded (also at shutdown)."""
        leaf = self._leaves.pop(id(session), None)
        if leaf is None:
            return
        cgroups = self._sandbox.cgroups()
        if self._nursery is None:
            cgroups.remove(leaf)
            return

        async def remove() -> None:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(cgroups.remove, leaf)

        self._nursery.start_soon(remove)

    async def _proxied(
        self, spec: DriverSpec, env: Mapping[str, str], opts: SessionOptions
    ) -> ProxiedCredential | None:
        """The credential the spec keeps out of this confined session (it may read a file:
        in a thread). One that cannot be worked out refuses the session: it would otherwise
        start with the key inside."""
        try:
            return await trio.to_thread.run_sync(
                spec.proxied_credential, dict(env), driver_options(opts.options)
            )
        except Exception as exc:
            raise SandboxUnavailable(
                f"driver {spec.name!r}: cannot keep its credential out of the sandbox "
                f"({type(exc).__name__}: {exc})",
                driver=spec.name,
            ) from None

    async def _sandboxed(
        self,
        spec: DriverSpec,
        opts: SessionOptions,
        env: Mapping[str, str],
        bridge: str = "",
        read_also: tuple[str, ...] = (),
        proxied: ProxiedCredential | None = None,
    ) -> list[str]:
        """The driver's argv under the session's sandbox policy. Raises `InvalidArgument` (a
        malformed policy) or `SandboxUnavailable` (one this machine cannot honour): the
        session never starts unconfined instead."""
        policy = policy_of(opts.options)
        argv = spec.argv(self._python)
        if not policy.confined:
            return argv
        # The binds need their sources: the working dir (the session would create it anyway)
        # and the state dir (else the driver's files would land in the sandbox's tmpfs).
        for path in (opts.working_dir, opts.state_dir):
            if path:
                try:
                    await trio.Path(path).mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise DriverUnavailable(
                        f"cannot create {path!r} for driver {spec.name!r}: {exc}",
                        driver=spec.name,
                    ) from None
        sandbox = self._sandbox
        return await trio.to_thread.run_sync(
            lambda: sandbox.wrap(
                argv,
                policy,
                spec=spec,
                environ=env,
                working_dir=opts.working_dir,
                state_dir=opts.state_dir,
                python=self._python,
                bridge=bridge,
                read_also=read_also,
                credential_proxy=proxied is not None,
                spec_read=proxied.sandbox_read if proxied is not None else None,
            )
        )
