#!/usr/bin/env node
// Generate src/protocol.gen.ts from the wire JSON Schema (`hostd protocol-schema`).
//
// Usage:
//   node scripts/gen-types.mjs [--check] [SCHEMA.json]
// Without SCHEMA.json the schema is taken from `$HOSTD protocol-schema` (HOSTD defaults to the
// repository's .venv/bin/hostd when it exists, else `hostd` on PATH). With --check nothing is
// written: the exit code is 1 when the checked-in file differs from what would be generated.
//
// Why our own ~200 lines and not json-schema-to-typescript: msgspec's schema uses draft 2020-12
// `prefixItems` (tuples) and tagged unions whose tag is a one-value `enum`; we want literal tag
// types, optional fields exactly where msgspec omits defaults, and a stable, dependency-free
// output. The schema uses a small subset of JSON Schema, and this script refuses anything else.
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const pkgRoot = resolve(here, "..");
const outPath = join(pkgRoot, "src", "protocol.gen.ts");

/** The JSON Schema document, from a file or from `hostd protocol-schema`. */
function loadSchema(path) {
  if (path) return JSON.parse(readFileSync(path, "utf-8"));
  const venvHostd = resolve(pkgRoot, "..", "..", ".venv", "bin", "hostd");
  const hostd = process.env.HOSTD ?? (existsSync(venvHostd) ? venvHostd : "hostd");
  return JSON.parse(execFileSync(hostd, ["protocol-schema"], { encoding: "utf-8" }));
}

const KNOWN_KEYS = new Set([
  "type", "properties", "required", "title", "description", "default", "enum", "$ref", "anyOf",
  "items", "prefixItems", "minItems", "maxItems", "additionalProperties", "discriminator",
]);

function refName(ref) {
  const prefix = "#/$defs/";
  if (!ref.startsWith(prefix)) throw new Error(`unsupported $ref ${ref}`);
  return ref.slice(prefix.length);
}

/** A TypeScript type expression for a schema. */
function typeOf(schema) {
  for (const key of Object.keys(schema)) {
    if (!KNOWN_KEYS.has(key)) throw new Error(`unsupported schema keyword ${key}`);
  }
  if (schema.$ref) return refName(schema.$ref);
  if (schema.anyOf) return schema.anyOf.map(typeOf).join(" | ");
  if (schema.enum) return schema.enum.map((v) => JSON.stringify(v)).join(" | ");
  switch (schema.type) {
    case "string":
      return "string";
    case "integer":
    case "number":
      return "number";
    case "boolean":
      return "boolean";
    case "null":
      return "null";
    case "array":
      if (schema.prefixItems) return `[${schema.prefixItems.map(typeOf).join(", ")}]`;
      if (schema.items) {
        const inner = typeOf(schema.items);
        return inner.includes(" ") ? `Array<${inner}>` : `${inner}[]`;
      }
      return "unknown[]";
    case "object":
      if (schema.properties) throw new Error("inline object types are not supported");
      if (schema.additionalProperties && typeof schema.additionalProperties === "object") {
        return `Record<string, ${typeOf(schema.additionalProperties)}>`;
      }
      return "Record<string, unknown>";
    default:
      throw new Error(`unsupported schema ${JSON.stringify(schema)}`);
  }
}

function docComment(text, indent) {
  if (!text) return "";
  const lines = text.split("\n").map((l) => l.replace(/\*\//g, "*\\/"));
  if (lines.length === 1) return `${indent}/** ${lines[0]} */\n`;
  return `${indent}/**\n${lines.map((l) => (l ? `${indent} * ${l}` : `${indent} *`)).join("\n")}\n${indent} */\n`;
}

/** All $defs reachable from the given root schemas, in first-seen order. */
function reachable(defs, roots) {
  const seen = new Set();
  const order = [];
  const visit = (schema) => {
    if (Array.isArray(schema)) return schema.forEach(visit);
    if (!schema || typeof schema !== "object") return;
    if (typeof schema.$ref === "string") {
      const name = refName(schema.$ref);
      if (!seen.has(name)) {
        seen.add(name);
        visit(defs[name]);
        order.push(name);
      }
    }
    for (const [key, value] of Object.entries(schema)) {
      if (key !== "$ref" && key !== "discriminator" && key !== "default") visit(value);
    }
  };
  roots.forEach(visit);
  return order;
}

function emitInterface(name, schema) {
  let out = docComment(schema.description, "");
  const required = new Set(schema.required ?? []);
  out += `export interface ${name} {\n`;
  const props = Object.entries(schema.properties ?? {});
  // The tag first, then the schema's (alphabetical) order: easy to read and stable.
  props.sort(([a], [b]) => (a === "type" ? -1 : b === "type" ? 1 : 0));
  for (const [prop, propSchema] of props) {
    let doc = propSchema.description ?? "";
    if ("default" in propSchema) {
      doc += `${doc ? "\n" : ""}Default: \`${JSON.stringify(propSchema.default)}\` (omitted on the wire).`;
    }
    out += docComment(doc, "  ");
    const optional = required.has(prop) ? "" : "?";
    out += `  readonly ${prop}${optional}: ${typeOf(propSchema)};\n`;
  }
  return `${out}}\n`;
}

function generate(doc) {
  const defs = doc.$defs;
  const roots = ["ClientMessage", "ServerMessage"];
  const names = reachable(defs, roots.map((r) => doc.properties[r]));
  const version = /hostd protocol (\d+)\.(\d+)/.exec(doc.description ?? "");
  if (!version) throw new Error("the schema's description does not name the protocol version");
  let out =
    "// GENERATED by scripts/gen-types.mjs from `hostd protocol-schema`. Do not edit by hand:\n" +
    "// run `npm run gen` (a test fails when this file is stale).\n" +
    "/* eslint-disable */\n\n" +
    "/** The protocol version the schema describes (major, minor). */\n" +
    `export const PROTOCOL_VERSION: readonly [number, number] = [${version[1]}, ${version[2]}];\n\n`;
  for (const name of names) {
    const schema = defs[name];
    if (schema.type === "object" && schema.properties) out += emitInterface(name, schema);
    else out += `${docComment(schema.description, "")}export type ${name} = ${typeOf(schema)};\n`;
    out += "\n";
  }
  for (const root of roots) {
    const members = doc.properties[root].anyOf.map(typeOf);
    out += `export type ${root} =\n${members.map((m) => `  | ${m}`).join("\n")};\n\n`;
    const tags = doc.properties[root].anyOf.map((s) => defs[refName(s.$ref)].properties.type.enum[0]);
    out += `/** Every \`type\` tag of ${root}. */\n`;
    out += `export const ${root.replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase()}_TYPES = [\n`;
    out += `${tags.map((t) => `  ${JSON.stringify(t)},`).join("\n")}\n] as const;\n\n`;
  }
  // Topic events: the server messages that carry a topic's `seq` (what a subscription gets).
  const events = doc.properties.ServerMessage.anyOf
    .map((s) => defs[refName(s.$ref)])
    .filter((d) => (d.required ?? []).includes("seq") && (d.required ?? []).includes("topic_id"))
    .map((d) => d.properties.type.enum[0]);
  out += "/** The `type` tags of topic events (server messages with a topic's `seq`). */\n";
  out += `export const TOPIC_EVENT_TYPES = [\n${events.map((t) => `  ${JSON.stringify(t)},`).join("\n")}\n] as const;\n\n`;
  return out.replace(/\n+$/, "\n");
}

const args = process.argv.slice(2);
const check = args.includes("--check");
const schemaPath = args.find((a) => !a.startsWith("--"));
const text = generate(loadSchema(schemaPath));
if (check) {
  const current = existsSync(outPath) ? readFileSync(outPath, "utf-8") : "";
  if (current !== text) {
    console.error(`${outPath} is stale: run \`npm run gen\` in protocol/typescript`);
    process.exit(1);
  }
} else {
  writeFileSync(outPath, text);
  console.error(`wrote ${outPath}`);
}
