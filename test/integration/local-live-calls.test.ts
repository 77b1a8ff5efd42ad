/**
 * Issue 36.6's probe, not a test of a rule: an external session's calls as activities and as local activities
 * (OZ0_EXPERIMENT_LOCAL_LIVE_CALLS, per job), one job each way: an echo made beside a 4 s read, a read its caller
 * cancels 1 s in, and a job cancelled 1 s into a read; it prints how long each took to reach the server.
 * bench/README.md, "The gateway: activities or local activities", has its figures.
 */
import path from 'node:path';
import { readReceived } from '../../examples/common';
import { startJob } from '../../client/jobs';
import { openSession } from '../../client/sessions';
import { createNode } from '../../worker/node';
import { LOCAL_LIVE_CALLS } from '../../activities';
import { example, logger, tmpDir, uniqueId, useTemporal } from '../helpers/temporal';

const temporal = useTemporal();
const dir = tmpDir();
const received = path.join(dir, 'received.jsonl');
jest.setTimeout(300_000);

test('issue 36.6 probe: concurrent calls and cancels of a live session, activities and local activities', async () => {
  const config = temporal.config({
    servers: { reader: { command: 'node', args: [example('reader')], env: { OZ0_RECEIVED_LOG: received } } },
    tools: { '*': { timeoutSeconds: 60, maxAttempts: 3 } },
  });
  const node = await createNode({ config, logger });
  const lines: string[] = [];
  await node.runUntil(async () => {
    for (const mode of ['local', 'activity']) {
      if (mode === 'local') process.env[LOCAL_LIVE_CALLS] = '1';
      else delete process.env[LOCAL_LIVE_CALLS];
      const handle = await startJob(
        { client: temporal.client, taskQueue: config.temporal.taskQueue },
        { tenant: uniqueId('t'), steps: [{ session: { external: true } }] },
        { workflowId: uniqueId(`probe-${mode}`) },
      );
      const session = await openSession(temporal.client, handle.workflowId, { client: 'probe' });
      await session.callTool('reader.echo', { text: 'warm' });
      // 1. a concurrent call: a slow read (4 s) and, 300 ms into it, an echo.
      const t0 = Date.now();
      const slow = session.callTool('reader.read_pages', { pages: 8, page_ms: 500 });
      await new Promise((r) => setTimeout(r, 300));
      const t1 = Date.now();
      await session.callTool('reader.echo', { text: 'beside' });
      const echoMs = Date.now() - t1;
      await slow;
      const slowMs = Date.now() - t0;
      // 2. a cancel of a slow read, 1 s in: until the server heard it.
      const give = new AbortController();
      const cancelled = session.callTool('reader.read_pages', { pages: 20, page_ms: 500 }, { signal: give.signal });
      await new Promise((r) => setTimeout(r, 1000));
      const tc = Date.now();
      give.abort('probe gives up');
      const res = await cancelled;
      const answerMs = Date.now() - tc;
      const heard = readReceived(received).filter(
        (r) => r.event === 'cancelled' && (r.key as string)?.startsWith(handle.workflowId),
      );
      const heardMs = heard.length ? (heard[0].t as number) - tc : NaN;
      // 3. a job cancel while a slow read runs: until the server heard it.
      const third = session.callTool('reader.read_pages', { pages: 20, page_ms: 500 }).catch(() => undefined);
      await new Promise((r) => setTimeout(r, 1000));
      const tj = Date.now();
      await handle.cancel();
      await handle.result().catch(() => undefined);
      const jobMs = Date.now() - tj;
      await third;
      const heard3 = readReceived(received).filter(
        (r) => r.event === 'cancelled' && (r.key as string)?.startsWith(handle.workflowId),
      );
      const after = heard3.filter((r) => (r.t as number) >= tj);
      const heard3Ms = after.length ? (after[0].t as number) - tj : NaN;
      const reads = readReceived(received).filter(
        (r) => r.tool === 'read_pages' && !r.event && (r.key as string)?.startsWith(handle.workflowId),
      ).length;
      const events = (await handle.fetchHistory()).events ?? [];
      const markers = events.filter((e) => e.markerRecordedEventAttributes).length;
      const tasks = events.filter((e) => e.workflowTaskCompletedEventAttributes).length;
      lines.push(
        `${mode}: echo beside a 4 s read answered in ${echoMs} ms (the read ${slowMs} ms); ` +
          `a call's cancel: server heard it ${heardMs} ms after, caller answered ${answerMs} ms (${String(res.content[0] && (res.content[0] as { text?: string }).text).slice(0, 60)}); ` +
          `job cancel: server heard it ${heard3Ms} ms after, job ended ${jobMs} ms; markers ${markers}, workflow tasks ${tasks}, read_pages requests the server got ${reads}`,
      );
    }
  });
  delete process.env[LOCAL_LIVE_CALLS];
  process.stdout.write(`\n${lines.join('\n')}\n`);
});
