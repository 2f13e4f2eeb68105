/** A scheduled run's user row is told apart from a typed one by the same rule as in Python. */
import assert from "node:assert/strict";
import { test } from "node:test";

import { scheduledBy } from "../src/index.js";

test("scheduledBy names the schedule of a run and nothing else", () => {
  assert.equal(scheduledBy({ meta: { client_msg_id: "schedule:sc1:1700000000.0" } }), "sc1");
  assert.equal(scheduledBy({ meta: { client_msg_id: "schedule:sc2:now:1700000000.5" } }), "sc2");
  assert.equal(scheduledBy({ meta: { client_msg_id: "k1" } }), "");
  assert.equal(scheduledBy({ meta: { client_msg_id: 7 } }), "");
  assert.equal(scheduledBy({ meta: {} }), "");
  assert.equal(scheduledBy({}), "");
});
