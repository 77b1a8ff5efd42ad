/**
 * A process's last words (STYLE "Failures say why"): how it ended, and the last lines it wrote on stderr, bounded and
 * with its secrets cut out. A harness's failed session (H7) and a server that dies at start or mid-call are both
 * reported with them, never only as "Connection closed".
 */
import os from 'node:os';
import type { Readable } from 'node:stream';

/**
 * Lines of stderr a failure quotes, at most: enough for the error line above a Node.js crash's printed fields, or
 * the last frames of a Python traceback.
 */
export const QUOTED_STDERR_LINES = 10;
/** A quoted line is cut to this many characters, and the quote to the last lines that fit in QUOTED_CHARS. */
const QUOTED_LINE_CHARS = 1000;
const QUOTED_CHARS = 4000;
/** A line in the node's log is cut to this many characters. */
const LOGGED_LINE_CHARS = 4000;
/** An unfinished line is kept to its last this many characters: a flood without a newline costs no memory. */
const PENDING_CHARS = 64 * 1024;
/** How long a process's stderr has to reach its end once the process has exited (a grandchild may hold it open). */
const DRAIN_MS = 1000;
/**
 * I10: what a tenant's process (a harness, a sandboxed server) may put in the node's log, per run: its first lines up
 * to these bounds; the rest is counted, and its last lines said with the count when its stderr ends.
 */
export const LOGGED_STDERR_LINES = 1000;
export const LOGGED_STDERR_BYTES = 256 * 1024;

/**
 * S2: a line that names an error (its kind, a missing module or package, a refused file or name): kept for a failure
 * to quote even once the last lines have moved past it — a Node.js crash names its cause at line 4 of 14.
 */
const NAMES_AN_ERROR =
  /(\b[A-Z]\w*(Error|Exception)\b|\bTraceback\b|Cannot find (module|package)|No module named|\bfatal\b|\bpanic\b|\bE(ACCES|PERM|NOENT|ROFS|AI_AGAIN|NOTFOUND)\b|Permission denied|Read-only file system|Name or service not known|Temporary failure in name resolution)/;
/** How many such lines a failure quotes beside the last ones: the first ones, where a cause is named. */
const NAMED_LINES = 2;

/** What a bounded stderr did not put in the node's log: how much, and its last lines (as a failure quotes them). */
export interface StderrDropped {
  lines: number;
  bytes: number;
  last: string;
}

/** Every secret in `text` replaced with `[redacted]`. */
export function redactIn(text: string, secrets: readonly string[]): string {
  return secrets.reduce((t, s) => (s ? t.split(s).join('[redacted]') : t), text);
}

/**
 * Reads a process's stderr: each line, secrets cut out, goes to `onLine` (the node's log), and the last
 * {@link QUOTED_STDERR_LINES} are kept for a failure to quote.
 */
export class StderrTail {
  private readonly lines: string[] = [];
  /** S2: the first lines that named an error, kept whatever came after. */
  private readonly named: string[] = [];
  private pending = '';
  private readonly ended: Promise<void>;

  /** I10: lines and bytes logged so far, and what was not. */
  private readonly logged = { lines: 0, bytes: 0 };
  private readonly dropped = { lines: 0, bytes: 0 };

  /**
   * `bounded`: a tenant's process (I10): past {@link LOGGED_STDERR_LINES} lines or {@link LOGGED_STDERR_BYTES}, lines
   * no longer go to `onLine`; once its stderr ends, `bounded` hears how much did not, with its last lines.
   */
  constructor(
    stream: Readable | null | undefined,
    private readonly secrets: readonly string[],
    onLine: (line: string) => void,
    bounded?: (dropped: StderrDropped) => void,
  ) {
    this.ended = new Promise((resolve) => {
      if (!stream) return resolve();
      stream.once('close', resolve);
      stream.once('end', resolve);
    });
    if (bounded)
      void this.ended.then(() => {
        if (this.dropped.lines > 0) bounded({ ...this.dropped, last: this.tail() });
      });
    // stdio are socket pairs: a process killed with bytes unread makes a read fail (ECONNRESET); its exit says the rest.
    stream?.on('error', () => undefined);
    stream?.on('data', (chunk: Buffer) => {
      const lines = (this.pending + chunk.toString('utf8')).split('\n');
      this.pending = (lines.pop() ?? '').slice(-PENDING_CHARS);
      for (const line of lines) {
        if (!line.trim()) continue;
        const redacted = this.redact(line);
        const logged = redacted.slice(0, LOGGED_LINE_CHARS);
        if (!bounded || (this.logged.lines < LOGGED_STDERR_LINES && this.logged.bytes < LOGGED_STDERR_BYTES)) {
          this.logged.lines++;
          this.logged.bytes += logged.length;
          onLine(logged);
        } else {
          this.dropped.lines++;
          this.dropped.bytes += line.length;
        }
        this.lines.push(cut(redacted));
        if (this.lines.length > QUOTED_STDERR_LINES) this.lines.shift();
        if (this.named.length < NAMED_LINES && NAMES_AN_ERROR.test(redacted)) this.named.push(cut(redacted));
      }
    });
  }

  private redact(line: string): string {
    return redactIn(line.replace(/\r$/, ''), this.secrets);
  }

  /**
   * The last lines, an unfinished one included, joined with ` | `; empty when it wrote nothing. The first lines that
   * named an error come first when the last ones no longer hold them (S2), then `…`.
   */
  tail(): string {
    const pending = this.pending.trim() ? [cut(this.redact(this.pending))] : [];
    const lines = [...this.lines, ...pending].slice(-QUOTED_STDERR_LINES);
    const before = this.named.filter((line) => !lines.includes(line));
    const head = before.length ? [...before, '…'] : [];
    while (lines.length > 1 && [...head, ...lines].join(' | ').length > QUOTED_CHARS) lines.shift();
    return [...head, ...lines].join(' | ');
  }

  /** S2: the whole of what it wrote that a failure may quote (the named lines and the last), for {@link sandboxHint}. */
  text(): string {
    return [...this.named, ...this.lines, this.pending].join('\n');
  }

  /** Resolves once the stream has ended, or after a short wait: what a process wrote before it exited is in. */
  async drained(): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.ended, new Promise<void>((resolve) => (timer = setTimeout(resolve, DRAIN_MS)))]);
    clearTimeout(timer);
  }
}

/** A line as a failure quotes it: without its indent (a traceback's), and cut short. */
function cut(line: string): string {
  const text = line.trim();
  return text.length > QUOTED_LINE_CHARS ? `${text.slice(0, QUOTED_LINE_CHARS - 1)}…` : text;
}

/**
 * How a process ended, in words: `exited with code 1`, `was killed by SIGKILL`, or the limit its sandbox went past.
 * A sandbox's bwrap passes a signal's death on as 128 + its number, as a shell does.
 */
export function endedWhy(
  exit: { code: number | null; signal: NodeJS.Signals | null },
  process: { isolated: boolean; stoppedFor(): string | undefined },
): { why: string; killedBy?: NodeJS.Signals; limit?: string } {
  const limit = process.stoppedFor();
  if (limit) return { why: `was stopped: its sandbox went past ${limit}`, limit };
  const killedBy = exit.signal ?? (process.isolated ? signalOf(exit.code) : undefined);
  if (killedBy) return { why: `was killed by ${killedBy}`, killedBy };
  return { why: `exited with code ${exit.code}` };
}

/** The signal a code of 128 + n stands for, if n is one. */
function signalOf(code: number | null): NodeJS.Signals | undefined {
  if (code === null || code <= 128) return undefined;
  return (Object.entries(os.constants.signals) as Array<[NodeJS.Signals, number]>).find(
    ([, n]) => n === code - 128,
  )?.[0];
}

/**
 * S2: what a sandboxed process's words most likely mean, when they name what a sandbox keeps from it: a package or
 * module it cannot find (its folder not granted), a name it cannot resolve (no network of its own), a file it may not
 * write. Undefined when they name none of these.
 */
export function sandboxHint(words: string): string | undefined {
  if (/ERR_MODULE_NOT_FOUND|Cannot find (module|package)|No module named|ModuleNotFoundError/.test(words))
    return 'a sandbox sees only the system’s folders, its program and its grants: grant the folder its packages are in (sandbox.read: its node_modules, its virtualenv)';
  if (/EAI_AGAIN|ENOTFOUND|getaddrinfo|Temporary failure in name resolution|Name or service not known/.test(words))
    return 'a sandbox has no network but the destinations its config grants (sandbox.network), and no DNS for any other';
  if (/EACCES|EROFS|Permission denied|Read-only file system/.test(words))
    return 'a sandbox writes only its own folder, its /tmp and its write grants (sandbox.write), as a user of its own';
  return undefined;
}

/** `said`, and the last words after it when there are any. */
export function withLastWords(said: string, tail: string): string {
  if (!tail) return said;
  return `${said ? `${said}; ` : ''}its last words on stderr: ${tail}`;
}

/** An error with what a process said as it went after the error's own words; the error itself as the cause. */
export function saying(error: unknown, words: string | undefined): unknown {
  if (!words) return error;
  return new Error(`${error instanceof Error ? error.message : String(error)}; ${words}`, { cause: error });
}
