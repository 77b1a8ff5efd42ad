/**
 * An example server that answers what browser tools, file readers and document converters answer every day (SPEC D1):
 * a page of text, a screenshot (a real PNG), a file as an embedded resource, a recording, a table as structured
 * content, links — each as large as asked. It reads only (every tool says `readOnlyHint`), but `save_snapshot`, which
 * says nothing, so oz0 gives it one attempt. Each answer's SHA-256 (over its content as sent) goes to the received log
 * (`OZ0_RECEIVED_LOG`), so a test compares what the job got with what the server answered, byte for byte.
 */
import { createHash } from 'node:crypto';
import zlib from 'node:zlib';
import { canonicalize } from 'json-canonicalize';
import { McpServer } from '@modelcontextprotocol/server';
import type { CallToolResult } from '@modelcontextprotocol/server';
import { z } from 'zod';
import { idempotencyKey, recordReceived, runMain, serveHttp } from './common';
import type { HttpHandle, ServerFactory } from './common';

/** The most any tool makes (MiB): past it the tool refuses, so a typo cannot fill a machine's memory. */
const MAX_MIB = 256;

/** Deterministic bytes: the same seed and size give the same answer on every attempt. */
function noise(bytes: number, seed: number): Buffer {
  const out = Buffer.allocUnsafe(bytes);
  let x = (seed * 2654435761) >>> 0 || 1;
  for (let i = 0; i < bytes; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x & 0xff;
  }
  return out;
}

/** Readable text of about `bytes` bytes: lines of words, numbered, from the seed. */
export function pageText(bytes: number, seed: number): string {
  const words = ['agent', 'tool', 'answer', 'durable', 'call', 'page', 'temporal', 'history', 'claim', 'store'];
  const raw = noise(Math.ceil(bytes / 6) + 1, seed);
  const parts: string[] = [];
  let size = 0;
  for (let i = 0; size < bytes; i++) {
    const word = i % 12 === 0 ? `\n${i / 12 + 1}.` : words[raw[i % raw.length] % words.length];
    parts.push(word);
    size += word.length + 1;
  }
  return parts.join(' ').slice(0, bytes);
}

/** A real PNG of width × height RGB pixels: a gradient under noise, so it barely compresses (a photo's size). */
export function screenshotPng(width: number, height: number, seed: number): Buffer {
  const chunk = (type: string, data: Buffer) => {
    const head = Buffer.alloc(8);
    head.writeUInt32BE(data.length, 0);
    head.write(type, 4, 'ascii');
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(zlib.crc32(Buffer.concat([head.subarray(4), data])) >>> 0, 0);
    return Buffer.concat([head, data, crc]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr.set([8, 2, 0, 0, 0], 8);
  const rows = noise((width * 3 + 1) * height, seed);
  for (let y = 0; y < height; y++) {
    const row = y * (width * 3 + 1);
    rows[row] = 0;
    for (let x = 0; x < width; x++) rows[row + 1 + x * 3] = (rows[row + 1 + x * 3] & 0x3f) + (x * 192) / width;
  }
  const signature = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  const idat = zlib.deflateSync(rows, { level: 1 });
  return Buffer.concat([signature, chunk('IHDR', ihdr), chunk('IDAT', idat), chunk('IEND', Buffer.alloc(0))]);
}

/**
 * SHA-256 of an answer's content as sent, for the received log: over its JSON in RFC 8785's canonical form, since an MCP
 * client's parse may reorder an item's keys (the same value, written in another order).
 */
export function contentDigest(result: { content: unknown[]; structuredContent?: unknown }): string {
  const value = {
    content: result.content,
    ...(result.structuredContent ? { structuredContent: result.structuredContent } : {}),
  };
  return createHash('sha256').update(canonicalize(value)).digest('hex');
}

const SIZE = z
  .number()
  .min(0)
  .max(MAX_MIB * 1024);
const SEED = z
  .number()
  .int()
  .min(0)
  .max(2 ** 31)
  .default(1);

export function createPages(): ServerFactory {
  return () => {
    const server = new McpServer({ name: 'oz0-example-pages', version: '0.1.0' });
    const reads = { readOnlyHint: true, openWorldHint: false };
    const answer = (tool: string, key: string | undefined, result: CallToolResult): CallToolResult => {
      recordReceived({ tool, key, sha256: contentDigest(result), items: result.content.length });
      return result;
    };

    server.registerTool(
      'read_page',
      {
        description: 'The text of a page, about `kib` KiB of it.',
        inputSchema: z.object({ kib: SIZE.default(4), seed: SEED }),
        annotations: reads,
      },
      async ({ kib, seed }, ctx) =>
        answer('read_page', idempotencyKey(ctx), {
          content: [{ type: 'text', text: pageText(Math.round(kib * 1024), seed) }],
        }),
    );

    server.registerTool(
      'screenshot',
      {
        description: 'A screenshot of the page: a PNG of width × height pixels (1280 × 800: about 2.9 MiB).',
        inputSchema: z.object({
          width: z.number().int().min(1).max(8192).default(1280),
          height: z.number().int().min(1).max(8192).default(800),
          seed: SEED,
        }),
        annotations: reads,
      },
      async ({ width, height, seed }, ctx) => {
        const png = screenshotPng(width, height, seed);
        return answer('screenshot', idempotencyKey(ctx), {
          content: [
            { type: 'image', data: png.toString('base64'), mimeType: 'image/png' },
            { type: 'text', text: `screenshot ${width}x${height}, ${png.length} bytes of PNG` },
          ],
        });
      },
    );

    server.registerTool(
      'read_file',
      {
        description: 'A file as an embedded resource: `kib` KiB, text or binary (a blob).',
        inputSchema: z.object({ kib: SIZE.default(64), binary: z.boolean().default(true), seed: SEED }),
        annotations: reads,
      },
      async ({ kib, binary, seed }, ctx) => {
        const bytes = Math.round(kib * 1024);
        const uri = `file:///reports/report-${seed}.${binary ? 'pdf' : 'txt'}`;
        const resource = binary
          ? { uri, mimeType: 'application/pdf', blob: noise(bytes, seed).toString('base64') }
          : { uri, mimeType: 'text/plain', text: pageText(bytes, seed) };
        return answer('read_file', idempotencyKey(ctx), { content: [{ type: 'resource', resource }] });
      },
    );

    server.registerTool(
      'record_audio',
      {
        description: 'A recording of the page read aloud: `kib` KiB of audio/wav.',
        inputSchema: z.object({ kib: SIZE.default(256), seed: SEED }),
        annotations: reads,
      },
      async ({ kib, seed }, ctx) =>
        answer('record_audio', idempotencyKey(ctx), {
          content: [
            { type: 'audio', data: noise(Math.round(kib * 1024), seed).toString('base64'), mimeType: 'audio/wav' },
          ],
        }),
    );

    server.registerTool(
      'table',
      {
        description: 'The page’s table as structured content: `rows` rows of `kib`/rows KiB, and links to its sources.',
        inputSchema: z.object({
          rows: z.number().int().min(1).max(1_000_000).default(100),
          kib: SIZE.default(64),
          seed: SEED,
        }),
        outputSchema: z.object({ rows: z.array(z.object({ n: z.number(), cell: z.string() })) }),
        annotations: reads,
      },
      async ({ rows, kib, seed }, ctx) => {
        const cell = Math.max(1, Math.round((kib * 1024) / rows));
        const structured = { rows: Array.from({ length: rows }, (_, n) => ({ n, cell: pageText(cell, seed + n) })) };
        return answer('table', idempotencyKey(ctx), {
          content: [
            { type: 'text', text: `${rows} rows` },
            { type: 'resource_link', uri: `https://example.com/tables/${seed}`, name: `table ${seed}` },
          ],
          structuredContent: structured,
        });
      },
    );

    server.registerTool(
      'save_snapshot',
      {
        description: 'Saves the page and answers its text: `kib` KiB. It says nothing of being safe to repeat.',
        inputSchema: z.object({ kib: SIZE.default(4), seed: SEED }),
      },
      async ({ kib, seed }, ctx) =>
        answer('save_snapshot', idempotencyKey(ctx), {
          content: [{ type: 'text', text: pageText(Math.round(kib * 1024), seed) }],
        }),
    );

    return server;
  };
}

/** Starts the pages server on Streamable HTTP (port 0 picks a free port). */
export async function startPagesServer(port = 0): Promise<HttpHandle> {
  return serveHttp(createPages(), port);
}

if (require.main === module) {
  runMain(createPages()).catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
