/**
 * An MCP stdio transport over a child process that leads its own process group, so the node can stop the
 * server's whole tree (C3). The SDK's StdioClientTransport neither isolates the environment nor kills more
 * than the direct child, which is why oz0 has its own.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { ReadBuffer, serializeMessage } from '@modelcontextprotocol/sdk/shared/stdio.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import type { Logger } from '../../common/logger';

export interface ProcessSpec {
  command: string;
  args: string[];
  cwd: string;
  /** The whole environment the process gets: nothing is inherited beyond it. */
  env: Record<string, string>;
}

export interface ProcessTransportOptions {
  /** A message larger than this closes the session: a huge answer costs the attempt, not the node. */
  maxMessageBytes?: number;
  /** How long SIGTERM has before the group gets SIGKILL. */
  killGraceMs?: number;
  logger?: Logger;
  label?: string;
}

const DEFAULT_MAX_MESSAGE_BYTES = 32 * 1024 * 1024;

/** Resolves a bare command through PATH (the node's, not the server's: a sandbox may have none). */
export function resolveCommand(command: string, pathEnv = process.env.PATH ?? ''): string {
  if (command === 'node') return process.execPath;
  if (command.includes('/')) return command;
  for (const dir of pathEnv.split(path.delimiter)) {
    if (!dir) continue;
    const candidate = path.join(dir, command);
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      return candidate;
    } catch {
      // not in this folder
    }
  }
  return command;
}

function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch {
    return false;
  }
}

function signalGroup(pgid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pgid, signal);
  } catch {
    // the group is gone already
  }
}

export class ProcessTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;

  private child?: ChildProcess;
  private readonly buffer: ReadBuffer;
  private exited?: Promise<void>;
  private closing?: Promise<void>;
  private closedNotified = false;

  constructor(
    private readonly spec: ProcessSpec,
    private readonly opts: ProcessTransportOptions = {},
  ) {
    this.buffer = new ReadBuffer({ maxBufferSize: opts.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES });
  }

  /** The server's pid, which is also its process group id. */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  start(): Promise<void> {
    if (this.child) throw new Error('ProcessTransport already started');
    return new Promise((resolve, reject) => {
      const child = spawn(resolveCommand(this.spec.command), this.spec.args, {
        cwd: this.spec.cwd,
        env: this.spec.env,
        stdio: ['pipe', 'pipe', 'pipe'],
        // Its own process group: the node stops the whole tree with one signal to -pid.
        detached: true,
      });
      this.child = child;
      this.exited = new Promise((done) => child.once('exit', () => done()));
      child.once('error', (err) => {
        reject(err);
        this.onerror?.(err);
        this.notifyClosed();
      });
      child.once('spawn', () => resolve());
      child.once('exit', (code, signal) => {
        this.opts.logger?.debug({ server: this.opts.label, code, signal }, 'server process exited');
        this.notifyClosed();
      });
      child.stdin?.on('error', (err) => this.onerror?.(err));
      child.stdout?.on('data', (chunk: Buffer) => this.onData(chunk));
      child.stderr?.on('data', (chunk: Buffer) => {
        this.opts.logger?.debug({ server: this.opts.label, stderr: chunk.toString('utf8', 0, 2000) }, 'server stderr');
      });
    });
  }

  private onData(chunk: Buffer): void {
    try {
      this.buffer.append(chunk);
      for (;;) {
        const message = this.buffer.readMessage();
        if (message === null) break;
        this.onmessage?.(message);
      }
    } catch (err) {
      // Garbage or an oversized line: this session cannot be trusted any more.
      this.onerror?.(new Error(`server sent a bad message: ${(err as Error).message}`));
      void this.close();
    }
  }

  send(message: JSONRPCMessage): Promise<void> {
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
    const child = this.child;
    if (!child?.pid) return this.notifyClosed();
    const pgid = child.pid;
    child.stdin?.end();
    signalGroup(pgid, 'SIGTERM');
    const graceMs = this.opts.killGraceMs ?? 2000;
    const deadline = Date.now() + graceMs;
    // The leader may die while a grandchild that ignores SIGTERM lives on in the group: wait for both.
    while (Date.now() < deadline && (child.exitCode === null && child.signalCode === null ? true : groupAlive(pgid))) {
      await new Promise((r) => setTimeout(r, 25));
    }
    signalGroup(pgid, 'SIGKILL');
    await this.exited;
    for (let i = 0; i < 40 && groupAlive(pgid); i++) await new Promise((r) => setTimeout(r, 25));
    this.buffer.clear();
    this.notifyClosed();
  }

  private notifyClosed(): void {
    if (this.closedNotified) return;
    this.closedNotified = true;
    this.onclose?.();
  }
}
