/**
 * What a harness hears of one call while it runs (H6, A7): its server's progress as the server reports it and, while
 * the call waits for a person's yes, a notification every `node.waitingNoticeMs` (10 s) that says so — so an MCP
 * client that resets its request timeout on progress (the TypeScript SDK's `resetTimeoutOnProgress`) keeps waiting,
 * however long the person takes.
 */
import type { Progress } from '../../model/schemas';
import type { CallNews } from '../call/relay';
/**
 * MCP progress increases with each notification of a request. A call waits before its first attempt, so its waiting
 * notices count up from 0 in steps this small: they stay under any progress its server reports once it runs.
 */
const WAITING_STEP = 1e-6;

export interface ProgressParams {
  progress: number;
  total?: number;
  message?: string;
}

export class HarnessProgress implements CallNews {
  private last = -Infinity;
  private timer?: NodeJS.Timeout;

  constructor(
    private readonly send: (params: ProgressParams) => void,
    /** How often a waiting call says it still waits. */
    private readonly noticeMs: number,
  ) {}

  progress(p: Progress): void {
    this.stopWaiting();
    // A later attempt's progress may start lower than the one before it reported.
    if (p.progress <= this.last) return;
    this.last = p.progress;
    this.send({ progress: p.progress, ...(p.total !== undefined ? { total: p.total } : {}) });
  }

  waiting(words: string | undefined): void {
    this.stopWaiting();
    if (words === undefined) return;
    const since = Date.now();
    const tell = () => {
      this.last = this.last < 0 ? 0 : this.last + WAITING_STEP;
      const waited = Math.round((Date.now() - since) / 1000);
      this.send({ progress: this.last, message: `${words} (waited ${waited} s)` });
    };
    tell();
    this.timer = setInterval(tell, this.noticeMs);
    this.timer.unref();
  }

  /** The call has ended: nothing more is said. */
  close(): void {
    this.stopWaiting();
  }

  private stopWaiting(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}
