/**
 * The answers of one multi-answer turn, side by side: each labelled with who wrote it
 * (assistant, or driver and model), streaming on its own, with its own status, error and
 * usage. After the turn one is chosen (the conversation continues from it) and the others are
 * marked alternatives; "Continue from this answer" picks another (`choose-answer`), also while
 * the turn still runs (the choice holds at its end). Every window sees the marks move through
 * `row-updated` events. While the turn runs, each streaming answer has its own Stop (protocol
 * 1.2: `stop` with its row): that answer ends `stopped`, the others go on; the composer's Stop
 * ends them all.
 */
import type { AnswerTarget, MessageRow, TopicInfo } from "hostd-client";

import { Row, type RowActions } from "./row";

/**
 * Who wrote an answer, as the CLI says it: `@assistant`, `driver/model`, `driver`; a target
 * left empty (lane 0: the topic's own) names the topic's assistant, driver and model.
 */
export function targetLabel(target: AnswerTarget | null | undefined, topic?: TopicInfo): string {
  const t = target ?? {};
  if (t.assistant) return `@${t.assistant}`;
  if (!t.driver && !t.model && topic?.assistant) return `@${topic.assistant}`;
  const driver = t.driver || topic?.driver || "topic driver";
  const model = t.model || (t.driver ? "" : (topic?.model ?? ""));
  return model ? `${driver}/${model}` : driver;
}

function usageText(row: MessageRow): string {
  const u = row.usage;
  if (!u) return "";
  const cost = u.cost_usd ? ` · $${u.cost_usd.toFixed(4)}` : "";
  return `in ${u.input_tokens ?? 0} · out ${u.output_tokens ?? 0}${cost}`;
}

export function AnswerGroup({
  answers,
  labels,
  actions,
  topic,
  choose,
  stop,
  running,
  waiting,
}: {
  answers: MessageRow[];
  labels: Map<string, string>;
  actions?: RowActions;
  topic?: TopicInfo;
  choose?: (row: MessageRow) => void;
  /** Stop this one answer (the turn runs and the daemon speaks 1.2), or none. */
  stop?: (row: MessageRow) => void;
  /** The turn still runs: no answer is chosen yet. */
  running: boolean;
  /** Tools each answer's open approvals name, by row id. */
  waiting?: Map<string, string[]>;
}) {
  // While the turn runs nothing is settled (the daemon already marks the extra answers as
  // alternatives, what would hold if it ended now): no marks, nobody dimmed, until its end.
  const settled = !running && answers.some((a) => a.alternative);
  return (
    <div class="answers" role="group" aria-label="Answers side by side" data-testid="answers" data-turn={answers[0]!.turn_id} style={{ "--answers": answers.length }}>
      {answers.map((row) => {
        const chosen = settled && !row.alternative;
        const extra = (
          <>
            {settled && row.alternative && <span class="badge alt" data-testid="alternative">alternative</span>}
            {chosen && <span class="badge chosen" data-testid="chosen" title="The conversation continues from this answer">chosen</span>}
            {stop && running && row.status === "pending" && (
              <button class="ghost small" data-testid="stop-answer" title="Stop this answer; the others go on"
                onClick={() => stop(row)}>
                Stop this answer
              </button>
            )}
            {row.usage && <span class="answer-usage" data-testid="answer-usage">{usageText(row)}</span>}
            {choose && !chosen && row.status !== "pending" && (
              <button class="ghost small" data-testid="choose" title="The next message continues from this answer; the others become alternatives"
                onClick={() => choose(row)}>
                Continue from this answer
              </button>
            )}
          </>
        );
        return (
          <Row key={row.id} row={row} label={labels.get(row.id) ?? ""} actions={actions}
            who={targetLabel(row.target, topic)} extra={extra} dim={settled && !!row.alternative}
            waiting={waiting?.get(row.id)} />
        );
      })}
    </div>
  );
}
