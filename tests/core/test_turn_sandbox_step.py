"""The sandbox / workspace step of the turn machine (issue 23): recorded when the session's
options ask for a confined sandbox or a standalone workspace, never otherwise."""

from __future__ import annotations

from hostd.core.assistants import AssistantConfig, RolesConfig
from hostd.core.turn import EndTurn, Phase, TurnMachine
from hostd_protocol.client_messages import TopicInfo
from hostd_protocol.common import Capabilities
from hostd_protocol.driver_messages import Send, TurnEnd
from hostd_protocol.errors import SandboxUnavailable


def opened(options: dict[str, object]) -> TurnMachine:
    topic = TopicInfo(id="tp1", title="t", driver="scripted", created_at=0.0, updated_at=0.0,
                      options=options)
    m = TurnMachine(topic=topic, send=Send(turn_id="t1", message_id="r1", text="hi"),
                    workspaces="/ws", now=0.0)
    m.start(0.0)
    m.config_loaded(AssistantConfig(name=""), RolesConfig(), 0.0)
    return m


def finish(m: TurnMachine, effects: list[object]) -> None:
    (end,) = [e.end for e in effects if isinstance(e, EndTurn)]
    m.turn_ended(end.status, end.error, end.error_code, 1.0)
    assert m.phase is Phase.ENDED


def test_a_confined_turn_records_its_sandbox_step() -> None:
    m = opened({"sandbox": "confined", "workspace": "turn"})
    m.session_opened("tp1", Capabilities(), 0.5)
    finish(m, m.driver_end(TurnEnd(turn_id="t1", status="success"), 0.6))
    (step, llm) = m.record.steps
    assert (step.kind, step.status, step.detail) == (
        "sandbox", "success", "sandbox confined (network none); workspace per turn"
    )
    assert llm.kind == "llm"


def test_a_refused_sandbox_fails_its_step() -> None:
    m = opened({"sandbox": {"mode": "confined", "network": "loopback"}})
    finish(m, m.lost(SandboxUnavailable("sandbox network 'loopback' needs the ports"), 0.5))
    (step,) = m.record.steps
    assert (step.kind, step.status) == ("sandbox", "error")


def test_no_policy_no_step() -> None:
    m = opened({})
    m.session_opened("tp1", Capabilities(), 0.5)
    finish(m, m.driver_end(TurnEnd(turn_id="t1", status="success"), 0.6))
    assert [s.kind for s in m.record.steps] == ["llm"]
