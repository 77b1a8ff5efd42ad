/**
 * A job's history as Temporal holds it, read the way an operator reads it: `temporal workflow show -o json` (what the
 * UI's download holds), with every payload decoded from its base64 — where a plain search of the JSON would miss it.
 */
import { execFileSync } from 'node:child_process';
import { readReceived } from '../../examples/common';
import { findTemporalCli } from '../../worker/temporal-cli';
import type { TemporalAt } from './temporal';

/** One payload of a history: its metadata (decoded), its bytes' size and its text. */
export interface HistoryPayload {
  metadata: Record<string, string>;
  bytes: number;
  text: string;
}

/** Every payload in a JSON export (any depth: inputs, results, markers, failures' details). */
export function payloadsIn(value: unknown, out: HistoryPayload[] = []): HistoryPayload[] {
  if (Array.isArray(value)) for (const v of value) payloadsIn(v, out);
  else if (value && typeof value === 'object') {
    const o = value as Record<string, unknown>;
    if (typeof o.data === 'string' && o.metadata && typeof o.metadata === 'object') {
      const data = Buffer.from(o.data, 'base64');
      const metadata = Object.fromEntries(
        Object.entries(o.metadata as Record<string, string>).map(([k, v]) => [k, Buffer.from(v, 'base64').toString()]),
      );
      out.push({ metadata, bytes: data.length, text: data.toString('utf8') });
    }
    for (const v of Object.values(o)) payloadsIn(v, out);
  }
  return out;
}

/** `temporal workflow <command> -o json` of one run (the latest without a run id), parsed. */
export function workflowJson(
  at: TemporalAt,
  command: 'show' | 'describe',
  workflowId: string,
  runId?: string,
): unknown {
  const cli = findTemporalCli({ install: false })!;
  const ids = ['--workflow-id', workflowId, ...(runId ? ['--run-id', runId] : [])];
  const json = execFileSync(
    cli,
    ['workflow', command, ...ids, '--address', at.address, '--namespace', at.namespace, '--output', 'json'],
    { encoding: 'utf8', maxBuffer: 256 * 2 ** 20 },
  );
  return JSON.parse(json);
}

/** Every payload of a run's history, as `temporal workflow show` prints it. */
export function historyPayloads(at: TemporalAt, workflowId: string, runId?: string): HistoryPayload[] {
  return payloadsIn(workflowJson(at, 'show', workflowId, runId));
}

/**
 * The most calls the servers ran at once, from their own log of starts and ends (a request is known by its server
 * process, `instance`, and its id there); `jobs`: only the calls of jobs whose id starts so.
 */
export function mostAtOnce(log: string, jobs?: string): number {
  const events = readReceived(log).filter((e) => e.tool === 'hang' && (e.event === 'start' || e.event === 'end'));
  const id = (e: Record<string, unknown>) => `${String(e.instance)}/${String(e.requestId)}`;
  const mine = new Set(events.filter((e) => e.event === 'start' && (!jobs || String(e.key).startsWith(jobs))).map(id));
  let now = 0;
  let most = 0;
  for (const e of events) {
    if (!mine.has(id(e))) continue;
    now += e.event === 'start' ? 1 : -1;
    most = Math.max(most, now);
  }
  return most;
}
