/**
 * D7: how a stored answer lies in its payload. An answer is mostly a few long strings (a page's text, an image's
 * base64); JSON would scan each for what to escape and write it again, and read it back the same way — a tenth of a
 * second for 10 MiB of text. So its payload (`encoding: binary/oz0-answer`) is the answer as JSON with every long
 * string taken out, then those strings' UTF-8 bytes one after another:
 *
 *   [u32 big-endian: n, the head's length][head: JSON { answer, strings: [[path, bytes], …] }][the strings' bytes]
 *
 * A path is the keys and indices that lead to the string. Only oz0 writes these payloads and only oz0 reads them
 * (data/answers.ts); a payload of Temporal's own JSON (an older oz0's) is read too.
 */
import type { Payload } from '@temporalio/common';

export const ANSWER_ENCODING = 'binary/oz0-answer';

/** A string this long or longer goes after the head, as its bytes. */
const LONG = 1024;
/** How deep a string may lie and still be taken out (an answer's own nesting; deeper ones stay in the head). */
const DEEPEST = 32;

type Path = Array<string | number>;

/** The answer's payload data. */
export function encodeAnswer(answer: unknown): Buffer {
  const strings: Array<[Path, number]> = [];
  const pieces: Buffer[] = [];
  const out = (value: unknown, path: Path): unknown => {
    if (typeof value === 'string') {
      if (value.length < LONG || path.length > DEEPEST) return value;
      const bytes = Buffer.from(value, 'utf8');
      strings.push([path, bytes.length]);
      pieces.push(bytes);
      return '';
    }
    if (Array.isArray(value)) return value.map((v, i) => out(v, [...path, i]));
    if (value && typeof value === 'object') {
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, out(v, [...path, k])]));
    }
    return value;
  };
  const head = Buffer.from(JSON.stringify({ answer: out(answer, []), strings }), 'utf8');
  const length = Buffer.alloc(4);
  length.writeUInt32BE(head.length, 0);
  return Buffer.concat([length, head, ...pieces]);
}

/** The answer a payload of ours holds; undefined for a payload of another encoding. */
export function decodeAnswer(payload: Payload): unknown {
  const encoding = payload.metadata?.encoding;
  if (!encoding || !payload.data || Buffer.from(encoding).toString() !== ANSWER_ENCODING) return undefined;
  const data = Buffer.from(payload.data.buffer, payload.data.byteOffset, payload.data.byteLength);
  const headLength = data.readUInt32BE(0);
  const { answer, strings } = JSON.parse(data.toString('utf8', 4, 4 + headLength)) as {
    answer: unknown;
    strings: Array<[Path, number]>;
  };
  let at = 4 + headLength;
  for (const [path, length] of strings) {
    if (at + length > data.length) throw new Error('a stored answer shorter than its head says');
    put(answer, path, data.toString('utf8', at, at + length));
    at += length;
  }
  return answer;
}

/** Sets the string at `path`, which the head says is there (an empty string in its place). */
function put(root: unknown, path: Path, value: string): void {
  let node = root as Record<string | number, unknown>;
  for (const key of path.slice(0, -1)) {
    const next = Object.hasOwn(node, key) ? node[key] : undefined;
    if (!next || typeof next !== 'object') throw new Error('a stored answer whose head leads nowhere');
    node = next as Record<string | number, unknown>;
  }
  const last = path.at(-1)!;
  if (!Object.hasOwn(node, last) || node[last] !== '') throw new Error('a stored answer whose head leads nowhere');
  node[last] = value;
}
