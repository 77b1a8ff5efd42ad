/**
 * (b)'s payloads (issue 36.7): the bytes one call puts in its job's history, from the history itself, against the bare
 * activity's. A job of sequential echo calls on an oz0 node and the bare workflow of as many calls, each history
 * summed by event type: its events encoded as the server stores and sends them (protobuf), and of that the payloads
 * (data and metadata: inputs, results, failures' details, memos, search attributes, headers, summaries). A heartbeat
 * is not an event: the attempt sends none for a call this short (activities/heartbeats.ts).
 */
import type { Client } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { fixed } from '../common';
import type { Row } from '../common';
import { benchConfig, echoSteps, startBareWorker, withNode } from '../env';
import type { BenchEnv } from '../env';

export interface PayloadsOptions {
  calls: number;
}

/** Bytes of one event type in a history. */
export interface EventBytes {
  events: number;
  /** The events, protobuf-encoded. */
  bytes: number;
  /** Of those, the payloads' data and metadata. */
  payloadBytes: number;
}

type Message = Record<string, unknown>;

/** The data and metadata of every payload in an event, however deep (a failure's cause's details included). */
export function payloadBytes(value: unknown): number {
  if (!value || typeof value !== 'object') return 0;
  if (value instanceof Uint8Array) return 0;
  if (Array.isArray(value)) return value.reduce((s: number, v) => s + payloadBytes(v), 0);
  const m = value as Message;
  if (m.data instanceof Uint8Array && (m.metadata === undefined || typeof m.metadata === 'object')) {
    const meta = Object.entries((m.metadata ?? {}) as Record<string, Uint8Array>);
    return m.data.length + meta.reduce((s, [k, v]) => s + k.length + (v?.length ?? 0), 0);
  }
  return Object.values(m).reduce((s: number, v) => s + payloadBytes(v), 0);
}

/** A workflow's history (every run of it), summed by event type. */
export async function historyBytes(client: Client, workflowId: string): Promise<Map<string, EventBytes>> {
  const events = (await client.workflow.getHandle(workflowId).fetchHistory()).events ?? [];
  const out = new Map<string, EventBytes>();
  for (const e of events) {
    const type = (temporal.api.enums.v1.EventType[e.eventType ?? 0] ?? String(e.eventType)).replace(/^EVENT_TYPE_/, '');
    const sum = out.get(type) ?? { events: 0, bytes: 0, payloadBytes: 0 };
    sum.events++;
    sum.bytes += temporal.api.history.v1.HistoryEvent.encode(e).finish().length;
    sum.payloadBytes += payloadBytes(e);
    out.set(type, sum);
  }
  return out;
}

function total(m: Map<string, EventBytes>): EventBytes {
  const t = { events: 0, bytes: 0, payloadBytes: 0 };
  for (const v of m.values()) {
    t.events += v.events;
    t.bytes += v.bytes;
    t.payloadBytes += v.payloadBytes;
  }
  return t;
}

/** The table of both histories by event type, per call. */
function byType(oz0: Map<string, EventBytes>, bare: Map<string, EventBytes>, calls: number): string {
  const types = [...new Set([...oz0.keys(), ...bare.keys()])].sort(
    (a, b) => (oz0.get(b)?.bytes ?? 0) - (oz0.get(a)?.bytes ?? 0),
  );
  const cell = (e: EventBytes | undefined) =>
    e ? `${fixed(e.events / calls, 2)} × ${fixed(e.bytes / calls, 0)} B (${fixed(e.payloadBytes / calls, 0)})` : '-';
  const lines = types.map((t) => `  ${t.padEnd(40)} ${cell(oz0.get(t)).padEnd(28)} ${cell(bare.get(t))}`);
  return [`  ${'per call: events × bytes (payloads)'.padEnd(40)} ${'oz0'.padEnd(28)} bare`, ...lines].join('\n');
}

export async function measurePayloads(env: BenchEnv, opts: PayloadsOptions) {
  const config = benchConfig(env, 'oz0-payloads', { jobs: { continueAsNewAfterCalls: 10_000 } });
  const bare = await startBareWorker(env, 'bare-payloads');
  const ids = { oz0: env.id('payloads-oz0'), bare: env.id('payloads-bare') };
  try {
    await withNode(env, config, async () => {
      await (
        await env.client.workflow.start('job', {
          taskQueue: 'oz0-payloads',
          workflowId: ids.oz0,
          args: [{ tenant: 'bench', steps: echoSteps(opts.calls) }],
        })
      ).result();
    });
    await env.client.workflow.execute('bareJob', {
      taskQueue: bare.taskQueue,
      workflowId: ids.bare,
      args: [opts.calls],
    });
  } finally {
    await bare.close();
  }
  const oz0 = await historyBytes(env.client, ids.oz0);
  const bareBytes = await historyBytes(env.client, ids.bare);
  const [a, b] = [total(oz0), total(bareBytes)];
  const perCall = (v: number) => v / opts.calls;
  process.stderr.write(`${byType(oz0, bareBytes, opts.calls)}\n`);
  const rows: Row[] = [
    {
      measure: '(b) history bytes per call: oz0 / bare',
      figure: `${fixed(a.bytes / b.bytes, 2)} (${fixed(perCall(a.bytes), 0)} / ${fixed(perCall(b.bytes), 0)} B; payloads ${fixed(perCall(a.payloadBytes), 0)} / ${fixed(perCall(b.payloadBytes), 0)} B; events ${fixed(perCall(a.events), 2)} / ${fixed(perCall(b.events), 2)})`,
    },
  ];
  return {
    rows,
    data: { ...opts, oz0: Object.fromEntries(oz0), bare: Object.fromEntries(bareBytes), totals: { oz0: a, bare: b } },
  };
}
