/**
 * How a stdio server's output is cut into JSON-RPC messages (mcp/process-transport.ts): a line that arrives whole
 * is decoded where it lies, one split across chunks is joined, and a line past the bound ends the session. The
 * integration tests (servers.test.ts) send real servers' answers, huge ones included, through it.
 */
import { LineBuffer } from '../../mcp/process-transport';

function linesOf(chunks: Array<string | Buffer>, max = 1024): string[] {
  const buffer = new LineBuffer(max);
  return chunks.flatMap((c) => buffer.push(Buffer.isBuffer(c) ? c : Buffer.from(c)));
}

test.each([
  ['nothing', [], []],
  ['one whole line', ['{"a":1}\n'], ['{"a":1}']],
  ['two lines in one chunk, and one left open', ['{"a":1}\n{"b":2}\n{"c"'], ['{"a":1}', '{"b":2}']],
  ['a line split over three chunks', ['{"a"', ':1', '}\n'], ['{"a":1}']],
  ['CRLF, and blank lines skipped', ['{"a":1}\r\n\n  \r\n{"b":2}\r', '\n'], ['{"a":1}', '{"b":2}']],
  ['the rest of a split line, then a whole one', ['{"a"', ':1}\n{"b":2}\n'], ['{"a":1}', '{"b":2}']],
])('%s', (_, chunks, lines) => {
  expect(linesOf(chunks)).toEqual(lines);
});

test('a character split between chunks is decoded whole', () => {
  const bytes = Buffer.from('{"t":"é€"}\n');
  expect(linesOf([bytes.subarray(0, 7), bytes.subarray(7)])).toEqual(['{"t":"é€"}']);
});

test('a line past the bound is refused, and the buffer starts clean after', () => {
  const buffer = new LineBuffer(8);
  buffer.push(Buffer.from('12345'));
  expect(() => buffer.push(Buffer.from('67890'))).toThrow('a message over 8 bytes');
  expect(buffer.push(Buffer.from('ok\n'))).toEqual(['ok']);
});
