/** An attachment's type is told by its bytes, by the same rule as in Python. */
import assert from "node:assert/strict";
import { test } from "node:test";

import { imageTypeOf } from "../src/index.js";

const b64 = (bytes: number[] | string): string =>
  Buffer.from(typeof bytes === "string" ? Buffer.from(bytes, "latin1") : Uint8Array.from(bytes)).toString("base64");

test("imageTypeOf tells PNG, JPEG, GIF and WebP by their signatures", () => {
  assert.equal(imageTypeOf("iVBORw0KGgo="), "image/png");
  assert.equal(imageTypeOf(b64([0xff, 0xd8, 0xff, 0xe0, 0, 0x10])), "image/jpeg");
  assert.equal(imageTypeOf(b64("GIF89a\x01\x00\x01\x00")), "image/gif");
  assert.equal(imageTypeOf(b64("RIFF\x24\x00\x00\x00WEBPVP8 ")), "image/webp");
  assert.equal(imageTypeOf(b64("# not a picture\n")), null);
  assert.equal(imageTypeOf("not base64!"), null);
  assert.equal(imageTypeOf(""), null);
});
