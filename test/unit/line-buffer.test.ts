/**
 * How a stdio server's output is cut into JSON-RPC messages (mcp/process-transport.ts): a line that arrives whole
 * is decoded where it lies, one split across chunks is joined, and a line past the bound ends the session. The
 * integration tests (servers.test.ts) send real servers' answers, huge ones included, through it.
 */
import { LineBuffer } from '../../mcp/process-transport';
import type { DroppedLine } from '../../mcp/process-transport';
import { droppedAnswer, droppedBytesOf, droppedIdOf } from '../../mcp/dropped';

function linesOf(chunks: Array<string | Buffer>, max = 1024): Array<string | DroppedLine> {
  const buffer = new LineBuffer(max);
  return chunks.flatMap((c) => buffer.push(Buffer.isBuffer(c) ? c : Buffer.from(c)));
}

test.each<[string, string[], string[]]>([
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

test('D1: a line past the bound is not held: it is counted and dropped, its two ends kept, and the next line is whole', () => {
  const buffer = new LineBuffer(8);
  expect(buffer.push(Buffer.from('{"id":4,'))).toEqual([]);
  expect(buffer.push(Buffer.from('"result":"xxxxxxxxxx'))).toEqual([]);
  const [dropped, next] = buffer.push(Buffer.from('xxxx"}\nok\n'));
  expect(dropped).toEqual({ bytes: 34, head: '{"id":4,"result":"xxxxxxxxxx', tail: '"result":"xxxxxxxxxxxxxx"}' });
  expect(next).toBe('ok');
  expect(buffer.push(Buffer.from('{"b":2}\n'))).toEqual(['{"b":2}']);
});

test('D1: a whole line past the bound in one chunk is dropped too', () => {
  expect(linesOf(['{"a":1}\n{"long":"0123456789"}\n{"b":2}\n'], 12)).toEqual([
    '{"a":1}',
    { bytes: 21, head: '{"long":"0123456789"}', tail: '{"long":"0123456789"}' },
    '{"b":2}',
  ]);
});

describe('D1: the request a dropped line answered', () => {
  test.each([
    [
      'the TypeScript SDK: id at the tail',
      { head: '{"result":{"content":[{"type":"text","text":"xx', tail: 'xx"}]},"jsonrpc":"2.0","id":7}' },
      7,
    ],
    ['the Python SDK: id at the head', { head: '{"jsonrpc":"2.0","id":12,"result":{"content":[', tail: 'xx"}]}}' }, 12],
    ['a string id', { head: '{"jsonrpc":"2.0","id":"r-1","result":{', tail: '}}' }, 'r-1'],
    ['an error response', { head: '{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"xxx', tail: 'xx"}}' }, 3],
    [
      "a request of the server's own",
      { head: '{"method":"sampling/createMessage","params":{"x":"', tail: '"},"jsonrpc":"2.0","id":5}' },
      undefined,
    ],
    ['garbage', { head: 'xxxxxxxxxxxxx', tail: 'xxxxxxxxxx' }, undefined],
  ])('%s', (_, ends, id) => {
    expect(droppedIdOf(ends)).toBe(id);
  });

  test("it stands as a result of the node's own making: its size, and a nonce no server knows", () => {
    const message = droppedAnswer({ bytes: 99, head: '{"jsonrpc":"2.0","id":1,"result":{', tail: '}}' }, 8) as {
      result: { _meta: Record<string, unknown> };
    };
    expect(droppedBytesOf(message.result)).toBe(99);
    // A server that writes the same _meta by hand does not know the nonce: its answer is no dropped one.
    const forged = { _meta: { 'oz0/dropped': { bytes: 99, nonce: 'guess' } } };
    expect(droppedBytesOf(forged)).toBeUndefined();
    expect(() => droppedAnswer({ bytes: 99, head: 'xx', tail: 'xx' }, 8)).toThrow(
      /past the bound of 8, for no request/,
    );
  });
});
