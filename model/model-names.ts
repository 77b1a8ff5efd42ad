/**
 * H3: the name a model takes for each tool. A tool is `<server>.<function>` everywhere in oz0 — policies, harness
 * patterns, the trace, metrics — but OpenAI's and Anthropic's APIs refuse a tool whose name is not
 * `^[a-zA-Z0-9_-]{1,64}$` (HTTP 400 at the first turn), so the gateway lists each tool under its model name:
 *
 * - `<server>__<function>` (`ledger__set_status`) when that fits: the server has no `__` and does not end in `_`,
 *   the function is letters, digits, `_` and `-` only, has no `__` and does not start with `_`, and the whole is at
 *   most 64 characters. Such a name has `__` at exactly one place, so it reads back to its tool.
 * - else `<server'>__<function'>__<digest>`: the server's first 20 characters and the function's first ones, any
 *   character outside the set turned into `_`, cut so the whole is 64 characters at most, then the first 16 hex
 *   digits of SHA-256 over `<server>.<function>` (`files__docs_read__46ec7809900cd2a7`). It has `__` at two places or
 *   more, so it is never the first form's; it is told back to its tool by the listing it came from.
 *
 * One-to-one: two tools of the first form differ because each reads back to its own tool; a name of one form is never
 * one of the other; two of the second form share a name only if SHA-256 of their tools agrees in 64 bits. Stable: a
 * tool's model name depends on its own name alone, never on the rest of the listing, the node or the time. Pure: the
 * workflow bundle may import it.
 */
import { sha256 } from '@noble/hashes/sha256';
import { bytesToHex, utf8ToBytes } from '@noble/hashes/utils';
import { splitTool } from './checks';

/** What the major model APIs take as a tool's name (OpenAI's and Anthropic's; Gemini's is wider). */
export const MODEL_NAME_PATTERN = /^[a-zA-Z0-9_-]{1,64}$/;
const MAX = 64;
const SEP = '__';
/** Hex digits of SHA-256 in a name of the second form: 64 bits. */
const DIGEST_HEX = 16;
/** The most a name of the second form keeps of its server's name, so its function keeps at least 22 characters. */
const SERVER_KEPT = 20;
const OUTSIDE = /[^a-zA-Z0-9_-]/g;
const IN_SET = /^[a-zA-Z0-9_-]+$/;

/** The name a model takes for `<server>.<function>`. */
export function modelToolName(tool: string): string {
  const { server, fn } = splitTool(tool);
  if (plainServer(server) && plainFunction(fn) && server.length + SEP.length + fn.length <= MAX) {
    return `${server}${SEP}${fn}`;
  }
  const digest = bytesToHex(sha256(utf8ToBytes(tool))).slice(0, DIGEST_HEX);
  const serverPart = server.replace(OUTSIDE, '_').slice(0, SERVER_KEPT);
  const room = MAX - serverPart.length - 2 * SEP.length - DIGEST_HEX;
  return `${serverPart}${SEP}${fn.replace(OUTSIDE, '_').slice(0, room)}${SEP}${digest}`;
}

/**
 * The tool a model name of the first form stands for (`ledger__set_status` → `ledger.set_status`); undefined for any
 * other name — one of the second form is looked up in the listing that gave it.
 */
export function toolOfModelName(name: string): string | undefined {
  if (!MODEL_NAME_PATTERN.test(name)) return undefined;
  const at = name.indexOf(SEP);
  if (at < 1 || name.indexOf(SEP, at + 1) !== -1) return undefined;
  const tool = `${name.slice(0, at)}.${name.slice(at + SEP.length)}`;
  return modelToolName(tool) === name ? tool : undefined;
}

function plainServer(server: string): boolean {
  return IN_SET.test(server) && !server.includes(SEP) && !server.endsWith('_');
}

function plainFunction(fn: string): boolean {
  return IN_SET.test(fn) && !fn.includes(SEP) && !fn.startsWith('_');
}
