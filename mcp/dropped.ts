/**
 * SPEC D1: an answer past the node's bound is not held, on any transport: it is dropped as it comes, and the request it
 * answered gets a result of the node's own making that says how big it was (`_meta["oz0/dropped"]`), so the call ends
 * with an error result that names its size and the bound — the server's session goes on, and a shared server's other
 * calls never notice. Only a message that names no request of ours (a huge request from the server, garbage) ends
 * the session.
 */
import { randomBytes } from 'node:crypto';
import type { JSONRPCMessage } from '@modelcontextprotocol/client';
import { DROPPED_META } from '../model/protocol';

/** This process's own: a server cannot name it, so it cannot make an answer of its own pass for a dropped one. */
const NONCE = randomBytes(12).toString('hex');

/** The largest message a transport takes whole: the bound on an answer (MiB), and room for its envelope. */
export function messageBound(maxResultMiB: number): number {
  return Math.round(maxResultMiB * 1024 * 1024) + 64 * 1024;
}

/** The two ends of a dropped line, as the stdio transport kept them. */
export interface DroppedEnds {
  bytes: number;
  head: string;
  tail: string;
}

/** The id a JSON-RPC response names: at its head (`{"jsonrpc":"2.0","id":7,…`), or at its tail (`…,"id":7}`). */
export function droppedIdOf(ends: Pick<DroppedEnds, 'head' | 'tail'>): number | string | undefined {
  const head = ends.head.slice(0, 200);
  // A request of the server's own (sampling, elicitation) is not an answer to one of ours.
  const method = head.indexOf('"method"');
  const result = Math.min(...['"result"', '"error"'].map((k) => head.indexOf(k)).filter((i) => i >= 0), Infinity);
  if (method >= 0 && method < result) return undefined;
  const atHead =
    /^\s*\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*(-?\d{1,15}|"[^"\\]{1,200}")\s*,\s*"(?:result|error)"/.exec(head);
  const atTail = /[,{]\s*"id"\s*:\s*(-?\d{1,15}|"[^"\\]{1,200}")\s*(?:,\s*"jsonrpc"\s*:\s*"2\.0"\s*)?\}\s*$/.exec(
    ends.tail,
  );
  const found = atHead?.[1] ?? atTail?.[1];
  if (found === undefined) return undefined;
  return found.startsWith('"') ? found.slice(1, -1) : Number(found);
}

/** The message that stands for a dropped line: the result of the request it answered, or why it cannot be one. */
export function droppedAnswer(ends: DroppedEnds, maxBytes: number, fallbackId?: string | number): JSONRPCMessage {
  const id = droppedIdOf(ends) ?? fallbackId;
  if (id === undefined)
    throw new Error(`a message of ${ends.bytes} bytes, past the bound of ${maxBytes}, for no request`);
  return {
    jsonrpc: '2.0',
    id,
    // `resultType` as a 2026-07-28 server writes it; an older session's client reads past it.
    result: { resultType: 'complete', content: [], _meta: { [DROPPED_META]: { bytes: ends.bytes, nonce: NONCE } } },
  } as JSONRPCMessage;
}

/** D1: the size of an answer the node dropped as it came, if this result stands for one. */
export function droppedBytesOf(result: { _meta?: Record<string, unknown> }): number | undefined {
  const dropped = result._meta?.[DROPPED_META] as { bytes?: unknown; nonce?: unknown } | undefined;
  return dropped?.nonce === NONCE && typeof dropped.bytes === 'number' ? dropped.bytes : undefined;
}

/**
 * D1 over Streamable HTTP: the answer to the POST that carried request `id`, its body bounded. A JSON body past the
 * bound, or an SSE event past it, is dropped as it comes and stands as the dropped answer to `id`; a server's own
 * request or notification past it is dropped alone. Everything within the bound passes as it came.
 */
export function boundedResponse(response: Response, id: string | number, maxBytes: number): Response {
  if (!response.body || !response.ok || !Number.isFinite(maxBytes)) return response;
  const type = response.headers.get('content-type') ?? '';
  const framer = type.includes('text/event-stream') ? new SseEvents(id, maxBytes) : new WholeBody(id, maxBytes);
  const body = response.body.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      transform: (chunk, out) => framer.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength), out),
      flush: (out) => framer.end(out),
    }),
  );
  return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
}

type Out = TransformStreamDefaultController<Uint8Array>;

/** The text a dropped answer to `id` stands as, given what was kept of its two ends. */
function standIn(ends: DroppedEnds, id: string | number, maxBytes: number): string | undefined {
  // A server's request or notification is not an answer: it goes, and nothing stands for it.
  if (/"method"\s*:/.test(ends.head.slice(0, 200)) && !/"(result|error)"\s*:/.test(ends.head.slice(0, 200))) {
    return undefined;
  }
  const named = droppedIdOf(ends);
  return JSON.stringify(droppedAnswer({ ...ends, head: '', tail: '' }, maxBytes, named ?? id));
}

/** An `application/json` body: passed on whole within the bound, else dropped. */
class WholeBody {
  private chunks: Buffer[] = [];
  private ends?: DroppedEnds;
  private size = 0;

  constructor(
    private readonly id: string | number,
    private readonly maxBytes: number,
  ) {}

  push(chunk: Buffer): void {
    this.size += chunk.length;
    if (!this.ends && this.size <= this.maxBytes) {
      this.chunks.push(chunk);
      return;
    }
    this.ends ??= { bytes: 0, head: Buffer.concat(this.chunks).subarray(0, 512).toString(), tail: '' };
    this.chunks = [];
    this.ends.bytes = this.size;
    this.ends.tail = (this.ends.tail + chunk.subarray(-512).toString()).slice(-512);
  }

  end(out: Out): void {
    if (!this.ends) {
      for (const c of this.chunks) out.enqueue(c);
      return;
    }
    out.enqueue(Buffer.from(standIn(this.ends, this.id, this.maxBytes) ?? ''));
  }
}

/** An SSE stream, event by event: one within the bound passes as it came, one past it is dropped as it comes. */
class SseEvents {
  private pending: Buffer[] = [];
  private size = 0;
  private ends?: DroppedEnds;

  constructor(
    private readonly id: string | number,
    private readonly maxBytes: number,
  ) {}

  /** Line breaks in a row (a `\r` before a `\n` counts for nothing): two end an event. */
  private breaks = 0;

  push(chunk: Buffer, out: Out): void {
    let start = 0;
    for (let i = 0; i < chunk.length; i++) {
      const byte = chunk[i];
      if (byte === 0x0a) this.breaks++;
      else if (byte !== 0x0d) this.breaks = 0;
      if (this.breaks === 2) {
        this.take(chunk.subarray(start, i + 1));
        this.endEvent(out);
        this.breaks = 0;
        start = i + 1;
      }
    }
    if (start < chunk.length) this.take(chunk.subarray(start));
  }

  end(out: Out): void {
    this.endEvent(out);
  }

  private take(piece: Buffer): void {
    this.size += piece.length;
    if (!this.ends && this.size <= this.maxBytes) {
      this.pending.push(piece);
      return;
    }
    if (!this.ends) {
      const head = Buffer.concat(this.pending)
        .toString()
        .replace(/^[\s\S]*?data: ?/, '');
      this.ends = { bytes: 0, head: head.slice(0, 512), tail: '' };
      this.pending = [];
    }
    this.ends.bytes = this.size;
    this.ends.tail = (this.ends.tail + piece.subarray(-512).toString()).slice(-512);
  }

  private endEvent(out: Out): void {
    if (this.ends) {
      const text = standIn(this.ends, this.id, this.maxBytes);
      if (text !== undefined) out.enqueue(Buffer.from(`event: message\ndata: ${text}\n\n`));
    } else {
      for (const c of this.pending) out.enqueue(c);
    }
    this.pending = [];
    this.size = 0;
    this.ends = undefined;
  }
}
