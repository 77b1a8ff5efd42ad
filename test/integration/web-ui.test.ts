/**
 * T3 in a real browser: the dev server's Temporal Web UI, as a user sees it in headless Chromium (puppeteer-core), for
 * a job that continued as new and has a call running. The job is found by its tenant (Oz0Tenant), its running call
 * shows its progress (the heartbeat), and right after the continue-as-new only its current run says running. Each
 * page is kept as a screenshot under `.oz0/test-artifacts/<run>/web-ui/`, and each check is also made against what
 * Temporal recorded (describe, visibility).
 *
 * Chromium is found by test/browser/install-chromium.sh: Debian's where present, else npm's @sparticuz/chromium (a
 * devDependency, unpacked into .tools/chromium/), else Debian's installed with apt-get; where none can be had, the test
 * is skipped and says why.
 */
import path from 'node:path';
import type { Browser, Page } from 'puppeteer-core';
import { connectJobClient, startJob } from '../../client/jobs';
import type { JobClient } from '../../client/jobs';
import { Oz0Status } from '../../model/job';
import { createNode } from '../../worker/node';
import type { Oz0Node } from '../../worker/node';
import { startDevServer } from '../../worker/dev-server';
import type { DevServer } from '../../worker/dev-server';
import { findTemporalCli } from '../../worker/temporal-cli';
import { artifactsDir, findChromium, launchBrowser, open, textOf, waitForText } from '../helpers/browser';
import {
  attributesOf,
  eventually,
  example,
  heartbeatOf,
  logger,
  testConfig,
  tmpDir,
  uniqueId,
} from '../helpers/temporal';
import { runLogDir } from '../logs';

const chromium = findChromium();
const cli = findTemporalCli({ install: false });
const why = 'why' in chromium ? chromium.why : cli ? undefined : 'no Temporal CLI: its dev server serves the Web UI';
if (why) console.warn(`web-ui.test.ts skipped: ${why}`);

let server: DevServer;
let node: Oz0Node;
let running: Promise<void>;
let jc: JobClient;
let browser: Browser;
let page: Page;
const shots = artifactsDir('web-ui');
const Oz0Columns = ['Oz0Status', 'Oz0Tenant', 'Oz0Tools'];

beforeAll(async () => {
  if (why) return;
  server = await startDevServer({ cli, logFile: path.join(runLogDir(), 'web-ui.temporal-server.log') });
  const config = testConfig(server.address, {
    servers: {
      reader: { command: 'node', args: [example('reader')] },
      ledger: { command: 'node', args: [example('ledger')], env: { LEDGER_FILE: path.join(tmpDir(), 'ledger.db') } },
    },
    // T2 after every call: the job's second step runs in its second run.
    jobs: { continueAsNewAfterCalls: 1 },
    // New payloads plain: this UI has no codec server (codec.test.ts has it), and shows the heartbeat as it is.
    payloads: { seal: 'off' },
  });
  node = await createNode({ config, logger });
  running = node.run();
  jc = await connectJobClient(config);
  browser = await launchBrowser((chromium as { path: string }).path);
  page = await browser.newPage();
  await page.setViewport({ width: 1680, height: 1000 });
}, 180_000);

afterAll(async () => {
  await browser?.close();
  await node?.shutdown();
  await running;
  await jc?.close();
  await server?.stop();
});

async function shoot(name: string): Promise<void> {
  await page.screenshot({ path: path.join(shots, `${name}.png`) });
}

(why ? test.skip : test)(
  `T3: the Web UI finds a job by Oz0Tenant, shows its running call's progress, and only its current run as running after a continue-as-new${why ? ` (skipped: ${why})` : ''}`,
  async () => {
    const ui = `${server.uiUrl}/namespaces/${server.namespace}/workflows`;
    const tenant = uniqueId('tenant');
    const pages = 80;
    const handle = await startJob(jc, {
      tenant,
      steps: [
        // A session's call gets a K3 key: its activity summary is the one that had to be cut short.
        { session: [{ call: 'ledger.set_status', args: { id: 't-1', status: 'open' } }] },
        { call: 'reader.read_pages', args: { pages, page_ms: 500 } },
      ],
    });
    const jobId = handle.workflowId;
    // Temporal's record first: the second run is current, and its call has reported progress in its heartbeat.
    const current = await eventually(
      async () => {
        const h = temporal().getHandle(jobId);
        const d = await h.describe();
        const call = d.raw.pendingActivities?.find((a) => a.activityType?.name === 'callTool');
        const beat = await heartbeatOf<{ progress?: number }>(h, call?.heartbeatDetails?.payloads?.[0]);
        const progress = beat?.progress ?? 0;
        return d.runId !== handle.firstExecutionRunId && (progress ?? 0) >= 2 ? d : undefined;
      },
      60_000,
      'the second run and its progress',
    );
    expect(attributesOf(current)).toMatchObject({ Oz0Status: 'running', Oz0Tenant: tenant });
    const first = await temporal().getHandle(jobId, handle.firstExecutionRunId).describe();
    expect([first.status.name, attributesOf(first).Oz0Status]).toEqual(['CONTINUED_AS_NEW', 'CONTINUED_AS_NEW']);

    // The list, filtered by tenant: both runs of the job, and its search attributes as columns.
    await open(page, `${ui}?query=${encodeURIComponent(`Oz0Tenant="${tenant}"`)}`, [jobId, 'CONTINUED AS NEW']);
    // Configure Columns: the job's search attributes in, the type and times out (the UI keeps it in the browser).
    await page.click('[data-testid=workflows-summary-table-configuration-button]');
    const columns = [...['Type', 'Start', 'End'].map((c) => `Remove ${c}`), ...Oz0Columns.map((c) => `Add ${c}`)];
    // The drawer slides in, and its lists render again after each click: a handle found a moment before may be gone or
    // still moving. A locator finds the button again until it is visible, in view and still, then clicks it.
    for (const button of columns) {
      await page.locator(`[aria-label="${button} column"]`).setTimeout(30_000).click();
    }
    await page.click('[data-testid=drawer-close-button]');
    await page.waitForSelector('[data-testid=drawer-close-button]', { hidden: true });
    const rows = async () =>
      page.$$eval('tbody tr', (trs) =>
        trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.innerText.trim())),
      );
    await eventually(
      async () => {
        const shown = await page.$$eval('th', (ths) => ths.map((th) => th.textContent?.trim() ?? ''));
        return Oz0Columns.every((c) => shown.includes(c)) ? true : undefined;
      },
      30_000,
      'the Oz0 columns',
    );
    await waitForText(page, ['CONTINUED_AS_NEW']);
    await shoot('1-list-by-tenant');
    const listed = (await rows()).filter((cells) => cells.includes(jobId));
    expect(listed).toHaveLength(2);
    // Status (Temporal's) and Oz0Status (the job's) agree on each run: one running, one continued as new.
    const statuses = listed.map((cells) => [cells.find((c) => /^(RUNNING|CONTINUED AS NEW)$/.test(c)), cells]);
    expect(statuses.map(([s]) => s).sort()).toEqual(['CONTINUED AS NEW', 'RUNNING']);
    for (const [status, cells] of statuses) {
      expect(cells).toContain(status === 'RUNNING' ? 'running' : 'CONTINUED_AS_NEW');
      expect(cells).toContain(tenant);
    }

    // The current run's running call: its attempt and its progress, in the pending activity's heartbeat.
    const run = `${ui}/${encodeURIComponent(jobId)}/${current.runId}`;
    await open(page, `${run}/pending-activities`, ['Heartbeat Details', 'reader.read_pages', `"total": ${pages}`]);
    const shown = await textOf(page);
    const progress = Number(/"progress": (\d+),\s*"total": \d+/.exec(shown)?.[1]);
    expect(progress).toBeGreaterThanOrEqual(1);
    expect(progress).toBeLessThanOrEqual(pages);
    await shoot('2-running-call-progress');

    // What the job says of itself now: the call running, its key; and the job's status right after the continue.
    await open(page, `${run}/user-metadata`, ['Current Details', `key ${jobId}/r1/c1`]);
    await waitForText(page, ['running', 'run 1, step 1 of 1', 'reader.read_pages']);
    await shoot('3-current-details');
    await open(page, `${run}/metadata`, ['"Oz0Status": "running"', `"Oz0Tenant": "${tenant}"`]);
    await shoot('4-current-run-search-attributes');

    // The run that continued as new: closed, said so, and linked to the job's current run.
    const closed = `${ui}/${encodeURIComponent(jobId)}/${handle.firstExecutionRunId}`;
    await open(page, `${closed}/metadata`, ['CONTINUED AS NEW', 'Latest Execution', '"Oz0Status": "CONTINUED_AS_NEW"']);
    await shoot('5-continued-run');
    await open(page, `${closed}/user-metadata`, [
      'Summary',
      `${tenant} · 2 steps · ledger.set_status, reader.read_pages`,
    ]);
    await shoot('6-continued-run-summary');
    // Its history: each call's activity summary, its tool and key, short enough for the column.
    await page.setViewport({ width: 1680, height: 1600 });
    const key = /#([0-9a-f]{8})/.exec(await sessionKeyOf(jobId, handle.firstExecutionRunId))![1];
    await open(page, `${closed}/history`, [`ledger.set_status · …/s1/set_status#${key}…/1`, 'Continued As New']);
    await shoot('7-continued-run-history');

    await handle.cancel();
    await eventually(async () =>
      (await temporal().getHandle(jobId).describe()).typedSearchAttributes.get(Oz0Status) === 'CANCELED'
        ? true
        : undefined,
    );
  },
  300_000,
);

/** The key of the first run's session call, as Temporal recorded it in the activity's input. */
async function sessionKeyOf(jobId: string, runId: string): Promise<string> {
  const { events } = await temporal().getHandle(jobId, runId).fetchHistory();
  const scheduled = events!.find((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'callTool')!;
  const input = scheduled.activityTaskScheduledEventAttributes!.input!.payloads![0].data!;
  return (JSON.parse(Buffer.from(input).toString()) as { key: string }).key;
}

function temporal() {
  return jc.client.workflow;
}
