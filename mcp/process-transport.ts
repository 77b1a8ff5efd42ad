/**
 * An MCP stdio transport over a child process that leads its own process group, so the node can stop the
 * server's whole tree (C3) — a plain process, or a sandbox (activities/sandbox). The SDK's StdioClientTransport neither
 * isolates the server nor kills more than the direct child, which is why oz0 has its own. It also keeps each server
 * to one process: the SDK's own stdio transport (exactly that class) asks for the protocol version on a throwaway copy
 * of the server (@modelcontextprotocol/client 2.4.0, `negotiateStdioViaSibling`), which would start every plugin and
 * sandbox twice; any other transport is asked in place, on the one process.
 */
import type { ChildProcess } from 'node:child_process';
import type { Readable } from 'node:stream';
import { deserializeMessage, serializeMessage } from '@modelcontextprotocol/client';
import type { JSONRPCMessage, Transport } from '@modelcontextprotocol/client';
import type { Logger } from '../common/logger';
import { StderrTail, endedWhy, redactIn, sandboxHint, withLastWords } from '../common/last-words';
import { resolveCommand, startGroup } from '../common/process-group';
import { droppedAnswer } from './dropped';
import type { GroupSpec, Started } from '../common/process-group';

export { resolveCommand };

export type ProcessSpec = GroupSpec;

export interface ProcessTransportOptions {
  /** A message larger than this closes the session: a huge answer costs the attempt, not the node. */
  maxMessageBytes?: number;
  /** How long SIGTERM has before the group gets SIGKILL. */
  killGraceMs?: number;
  /** How long a server has to exit on its own once its stdin is closed, before SIGTERM. */
  stdinGraceMs?: number;
  logger?: Logger;
  label?: string;
  /** Values cut out of its stderr wherever it is shown (the ones its `env` took from the node's environment). */
  secrets?: string[];
  /**
   * I12: whether a failure quotes its stderr (true by default: a job's own sandboxed server, an operator's tool).
   * False for a server every tenant shares, whose stderr may hold any tenant's words once it took a call: a failure
   * then says how it ended and that its last words are in the node's log, where they go as a warning. Before its
   * first call its words are its own (a missing module, a folder that is not there) and are quoted all the same.
   */
  quoteStderr?: boolean;
  /** I10: a tenant's process (a sandboxed server): what its stderr puts in the node's log is bounded. */
  boundStderr?: boolean;
}

const DEFAULT_MAX_MESSAGE_BYTES = 32 * 1024 * 1024;

/** I12: what a node sends a server that carries none of a tenant's words; anything else counts as a call taken. */
const PROTOCOL_ONLY = new Set(['server/discover', 'initialize', 'notifications/initialized', 'tools/list', 'ping']);

export class ProcessTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;

  private child?: ChildProcess;
  private started?: Started;
  private readonly lines: LineBuffer;
  private closing?: Promise<void>;
  private closedNotified = false;
  private stderrTail?: StderrTail;
  /** How the process ended, once it has; `own`: before oz0 stopped it. */
  private exit?: { code: number | null; signal: NodeJS.Signals | null; own: boolean };
  /** Why oz0 stopped trusting it: what was wrong with a message it sent. */
  private badMessage?: string;
  /** Its last words went to the node's log (a shared server's, I12). */
  private toldLog = false;
  /** I12: it was sent a tenant's words (a call): from then on a shared server's stderr is not quoted. */
  private tookCall = false;

  /** `source`: a plain process's spec, or how to start it (a sandbox). */
  constructor(
    private readonly source: ProcessSpec | (() => Promise<Started>),
    private readonly opts: ProcessTransportOptions = {},
  ) {
    this.lines = new LineBuffer(opts.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES);
  }

  /** The server's pid, which is also its process group id. */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** The process exited (or never started): its transport is closed. */
  get ended(): boolean {
    return this.closedNotified;
  }

  /**
   * The server's stderr. With `pid`, it tells the SDK's protocol probe that this is a stdio server, so a server that
   * stays silent on `server/discover` is taken for an older one (the `initialize` handshake follows on the same
   * process) rather than for a dead one.
   */
  get stderr(): Readable | null {
    return this.child?.stderr ?? null;
  }

  /** Whether the server runs in a sandbox of its own (I1). */
  get isolated(): boolean {
    return this.started?.isolated ?? false;
  }

  /** The limit its sandbox went past and was stopped for (I4), in words. */
  stoppedFor(): string | undefined {
    return this.started?.stoppedFor();
  }

  /** I3: what its sandbox's network refused since `since` (ms), in words. */
  refusedSince(since: number): string[] {
    return this.started?.refusedSince?.(since) ?? [];
  }

  /**
   * What the server said as it went, for a failure to quote (STYLE "Failures say why"): how it ended, if it ended
   * before oz0 stopped it, and its last lines on stderr (bounded, its secrets cut out). Undefined while it runs, and
   * when it said nothing.
   */
  async lastWords(): Promise<string | undefined> {
    if (!this.exit || !this.stderrTail) return undefined;
    await this.stderrTail.drained();
    const tail = this.stderrTail.tail();
    const said = this.exit.own
      ? `the server ${endedWhy(this.exit, this).why}`
      : this.badMessage
        ? `the server sent a bad message (${this.badMessage}) and was stopped`
        : '';
    if (!tail || this.opts.quoteStderr !== false || !this.tookCall) {
      if (!said && !tail) return undefined;
      // S2: what a sandbox kept from it, when its words name that.
      const hint = this.isolated ? sandboxHint(this.stderrTail.text()) : undefined;
      return `${withLastWords(said, tail)}${hint ? ` (hint: ${hint})` : ''}`;
    }
    // I12: a shared server that took a call may have any tenant's words on its stderr: they are the operator's, its
    // log has them, once; the failure says where.
    if (!this.toldLog) {
      this.toldLog = true;
      this.opts.logger?.warn(
        { server: this.opts.label, lastWords: withLastWords(said, tail) },
        "a shared server's last words (its failure names the node's log, never quotes them to a tenant)",
      );
    }
    return `${said ? `${said}; ` : ''}its last words on stderr are in the node's log (a shared server's, never quoted)`;
  }

  async start(): Promise<void> {
    if (this.child) throw new Error('ProcessTransport already started');
    let child: ChildProcess;
    try {
      const { source } = this;
      this.started = await (typeof source === 'function' ? source() : startGroup(source));
      child = this.started.child;
    } catch (err) {
      this.onerror?.(err as Error);
      this.notifyClosed();
      throw err;
    }
    this.child = child;
    child.on('error', (err) => this.onerror?.(err));
    child.once('exit', (code, signal) => {
      this.exit = { code, signal, own: !this.closing };
      this.opts.logger?.debug({ server: this.opts.label, code, signal }, 'server process exited');
      this.notifyClosed();
    });
    child.stdin?.on('error', (err) => this.onerror?.(err));
    // stdio are socket pairs: a server killed with bytes of ours unread makes a read fail (ECONNRESET). That ends
    // this session (its exit closes it), never the node.
    child.stdout?.on('error', (err) => this.onerror?.(err));
    child.stdout?.on('data', (chunk: Buffer) => this.onData(chunk));
    const { logger, label } = this.opts;
    this.stderrTail = new StderrTail(
      child.stderr,
      this.opts.secrets ?? [],
      (line) => logger?.debug({ server: label, stderr: line }, 'server stderr'),
      this.opts.boundStderr
        ? (dropped) =>
            logger?.debug(
              { server: label, droppedLines: dropped.lines, droppedBytes: dropped.bytes, lastLines: dropped.last },
              'server stderr past its bound (I10): the rest was not logged, only counted, with its last lines',
            )
        : undefined,
    );
  }

  private onData(chunk: Buffer): void {
    try {
      for (const line of this.lines.push(chunk)) {
        this.onmessage?.(
          typeof line === 'string' ? deserializeMessage(line) : droppedAnswer(line, this.lines.maxBytes),
        );
      }
    } catch (err) {
      // Garbage or an oversized line: this session cannot be trusted any more.
      this.badMessage ??= redactIn((err as Error).message, this.opts.secrets ?? []).slice(0, 200);
      this.onerror?.(new Error(`server sent a bad message: ${(err as Error).message}`));
      void this.close();
    }
  }

  send(message: JSONRPCMessage): Promise<void> {
    if ('method' in message && !PROTOCOL_ONLY.has(message.method)) this.tookCall = true;
    return new Promise((resolve, reject) => {
      const stdin = this.child?.stdin;
      if (!stdin || stdin.destroyed) return reject(new Error('server process is not running'));
      if (stdin.write(serializeMessage(message))) resolve();
      else stdin.once('drain', () => resolve());
    });
  }

  /** Stops the whole process group: SIGTERM, then SIGKILL after the grace; resolves once it is gone. */
  close(): Promise<void> {
    this.closing ??= this.stopGroup();
    return this.closing;
  }

  private async stopGroup(): Promise<void> {
    if (!this.started?.child.pid) return this.notifyClosed();
    await this.started.stop(this.opts.killGraceMs ?? 5000, this.opts.stdinGraceMs ?? 2000);
    this.lines.clear();
    this.notifyClosed();
  }

  private notifyClosed(): void {
    if (this.closedNotified) return;
    this.closedNotified = true;
    this.onclose?.();
  }
}

/** D1: a line past the bound, dropped as it came: its size, and enough of each end to tell which request it answered. */
export interface DroppedLine {
  bytes: number;
  head: string;
  tail: string;
}

/** How much of each end of a dropped line is kept. */
const DROPPED_ENDS = 512;

/**
 * Splits stdout into lines. Not the SDK's ReadBuffer: since 2.x it skips a line that is not JSON, and a server that
 * writes garbage on the protocol's channel is one oz0 stops trusting (the session closes, the call fails), rather
 * than one whose call waits out its time limit for an answer lost in the noise. A line past the bound is not held
 * (D1): it is counted as it comes and dropped, keeping its two ends, so that the answer it carried can be named.
 */
export class LineBuffer {
  private pending: Buffer[] = [];
  private size = 0;
  private dropping?: { bytes: number; head: Buffer; tail: Buffer };

  constructor(readonly maxBytes: number) {}

  push(chunk: Buffer): Array<string | DroppedLine> {
    const lines: Array<string | DroppedLine> = [];
    let start = 0;
    for (let end = chunk.indexOf(0x0a); end !== -1; end = chunk.indexOf(0x0a, start)) {
      const piece = chunk.subarray(start, end);
      start = end + 1;
      if (this.dropping || this.size + piece.length > this.maxBytes) {
        if (this.dropping) this.dropMore(piece);
        else this.beginDropping(piece);
        lines.push(this.endDropping());
        continue;
      }
      // A line that arrived whole (most do) is decoded where it lies, not copied into a buffer of its own first.
      const text = this.pending.length
        ? Buffer.concat([...this.pending, piece]).toString('utf8')
        : piece.toString('utf8');
      const line = text.endsWith('\r') ? text.slice(0, -1) : text;
      this.clear();
      if (line.trim()) lines.push(line);
    }
    const rest = chunk.subarray(start);
    if (rest.length === 0) return lines;
    if (!this.dropping && this.size + rest.length > this.maxBytes) this.beginDropping(rest);
    else if (this.dropping) this.dropMore(rest);
    else {
      this.pending.push(rest);
      this.size += rest.length;
    }
    return lines;
  }

  clear(): void {
    if (this.pending.length) this.pending = [];
    this.size = 0;
    this.dropping = undefined;
  }

  /** The line in hand went past the bound: keep its head, then only count what comes and keep its tail. */
  private beginDropping(piece: Buffer): void {
    const head = Buffer.concat([...this.pending.slice(0, 4), piece]).subarray(0, DROPPED_ENDS);
    const bytes = this.size;
    this.pending = [];
    this.size = 0;
    this.dropping = { bytes, head: Buffer.from(head), tail: Buffer.alloc(0) };
    this.dropMore(piece);
  }

  private dropMore(piece: Buffer): void {
    const d = this.dropping!;
    d.bytes += piece.length;
    d.tail = Buffer.from(Buffer.concat([d.tail, piece.subarray(-DROPPED_ENDS)]).subarray(-DROPPED_ENDS));
  }

  private endDropping(): DroppedLine {
    const { bytes, head, tail } = this.dropping!;
    this.dropping = undefined;
    return { bytes, head: head.toString('utf8'), tail: tail.toString('utf8') };
  }
}
