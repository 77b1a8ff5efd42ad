/**
 * I2 (issue 34.2): one folder per job, always. Job ids may hold `/`, `:` and `@`; a folder named by replacing them
 * gave tenant beta's job `a_1` and tenant acme's job `a/1` one folder, so beta listed what acme wrote and the first
 * job to end deleted it under the other. Tried here with the hostile server (test/fixtures/hostile.js) and the probe
 * harness, beside the control that each job sees its own file (the listing can show one).
 */
import fs from 'node:fs';
import path from 'node:path';
import type { LoadedConfig } from '../../common/config';
import { folderName, makeFreshFolder, sandboxFolderName, sessionFolderName } from '../../activities/sandbox/folders';
import { createNode } from '../../worker/node';
import { callsOf, isSessionTrace } from '../../model/job';
import type { JobTrace } from '../../model/job';
import type { JobSpec } from '../../model/schemas';
import { eventually, fixture, logger, tmpDir, useTemporal } from '../helpers/temporal';
import { probeHarness, sandboxed, writableDir } from '../helpers/sandbox';

const temporal = useTemporal();

/** A node's folder of its sandboxes or its sessions. */
function nodeRoot(config: LoadedConfig, queue: string, kind: 'sandboxes' | 'sessions'): string {
  return path.resolve(config.baseDir, config.node.stateDir, kind, queue.replace(/\//g, '_'));
}

/** A node's folders of jobs (not the claim that says whose it is). */
function jobFolders(dir: string): string[] {
  return fs.readdirSync(dir).filter((name) => !name.startsWith('.'));
}

function start(config: LoadedConfig, workflowId: string, spec: JobSpec) {
  return temporal.client.workflow.start('job', { taskQueue: config.temporal.taskQueue, workflowId, args: [spec] });
}

test('I2: a folder’s name is a digest of tenant and job behind a readable prefix: `a/1` and `a_1` of two tenants, and one job id of two tenants, make different folders', () => {
  const names = [
    sandboxFolderName({ tenant: 'acme', jobId: 'a/1' }, 'box'),
    sandboxFolderName({ tenant: 'beta', jobId: 'a_1' }, 'box'),
    sandboxFolderName({ tenant: 'beta', jobId: 'a/1' }, 'box'),
    sandboxFolderName({ tenant: 'acme', jobId: 'a:1' }, 'box'),
    sandboxFolderName({ tenant: 'acme', jobId: 'a/1' }, 'vic'),
    sessionFolderName({ tenant: 'acme', jobId: 'a/1' }, 's1', 1),
    sessionFolderName({ tenant: 'beta', jobId: 'a_1' }, 's1', 1),
    sessionFolderName({ tenant: 'acme', jobId: 'a/1' }, 's1', 2),
  ];
  expect(new Set(names).size).toBe(names.length);
  expect(names[0]).toMatch(/^box-a_1-[0-9a-f]{20}$/);
  expect(names[5]).toMatch(/^a_1-s1-1-[0-9a-f]{20}$/);
  // Dots and slashes make one folder inside the root, never a hidden one; a long id is cut in its readable part only.
  expect(folderName('..', ['x'])).toMatch(/^_-[0-9a-f]{20}$/);
  expect(folderName('../../etc', ['x'])).toMatch(/^__\.\._etc-[0-9a-f]{20}$/);
  expect(sandboxFolderName({ tenant: 't', jobId: 'j'.repeat(1000) }, 'box').length).toBeLessThan(100);
  // The same owner, the same name (a server that crashed starts again in its folder while its pool holds it).
  expect(sandboxFolderName({ tenant: 'acme', jobId: 'a/1' }, 'box')).toBe(names[0]);
});

test('I2: a folder already there is never taken over: a fresh one is made beside it, and the log says so', () => {
  const root = tmpDir();
  const name = sandboxFolderName({ tenant: 'acme', jobId: 'a/1' }, 'box');
  fs.mkdirSync(path.join(root, name));
  fs.writeFileSync(path.join(root, name, 'planted.txt'), 'left by someone else');
  const warned: unknown[] = [];
  const spy = { ...logger, warn: (...args: unknown[]) => warned.push(args) } as unknown as typeof logger;
  const made = makeFreshFolder(root, name, spy);
  expect(made).not.toBe(path.join(root, name));
  expect(path.basename(made)).toMatch(new RegExp(`^${name}-[0-9a-f]{8}$`));
  expect(fs.readdirSync(made)).toEqual([]);
  expect(warned).toHaveLength(1);
  expect(JSON.stringify(warned[0])).toContain('left alone and a fresh one made beside it');
  // The control: where nothing is, the folder is made under its own name.
  expect(makeFreshFolder(root, 'other-0123', spy)).toBe(path.join(root, 'other-0123'));
});

test('I2: tenant beta’s job `a_1` does not see what tenant acme’s job `a/1` wrote in its sandbox’s folder, and its end deletes nothing of acme’s; acme sees its own file (the control)', async () => {
  const gate = writableDir('oz0-gate-');
  const flag = path.join(gate, 'go');
  const config = temporal.config({
    servers: {
      box: { command: 'node', args: [fixture('hostile.js'), 'server'], sandbox: sandboxed({ read: [gate] }) },
    },
  });
  const node = await createNode({ config, logger });
  const { acme, beta, folders } = await node.runUntil(async () => {
    const acmeJob = await start(config, 'a/1', {
      tenant: 'acme',
      steps: [
        { call: 'box.folder', args: { write: 'acme.txt' } },
        { call: 'box.folder', args: { waitFor: flag } },
      ],
    });
    await eventually(
      async () => ((await acmeJob.query<JobTrace>('trace')).steps.length > 0 ? true : undefined),
      30_000,
      'acme’s first call',
    );
    const betaTrace: JobTrace = await (
      await start(config, 'a_1', { tenant: 'beta', steps: [{ call: 'box.folder', args: { write: 'beta.txt' } }] })
    ).result();
    // On the node's side, while acme's job still runs: its folder is there, and beta's went with beta's job.
    const folders = jobFolders(nodeRoot(config, node.identity.queue, 'sandboxes'));
    fs.writeFileSync(flag, '');
    return { acme: (await acmeJob.result()) as JobTrace, beta: betaTrace, folders };
  });
  const seen = (trace: JobTrace, i: number) =>
    callsOf(trace)[i].result.structuredContent as { cwd: string; entries: string[] };
  expect(seen(beta, 0).entries).toEqual(['beta.txt']);
  expect(seen(acme, 0).entries).toEqual(['acme.txt']);
  expect(seen(acme, 1).entries).toEqual(['acme.txt']);
  expect(seen(acme, 0).cwd).not.toBe(seen(beta, 0).cwd);
  expect(folders).toEqual([sandboxFolderName({ tenant: 'acme', jobId: 'a/1' }, 'box')]);
});

test('I2: two harness sessions of jobs `b/1` (acme) and `b_1` (beta) at once each see only their own session folder', async () => {
  const gate = writableDir('oz0-gate-');
  const flag = path.join(gate, 'go');
  const config = temporal.config({
    servers: { box: { command: 'node', args: [fixture('probe-server.js')], sandbox: sandboxed() } },
    harnesses: { probe: probeHarness(['box.*'], sandboxed({ read: [gate] })) },
  });
  const session = (file: string) => ({
    session: { harness: 'probe', input: { steps: [{ file }, { waitFile: flag }, { ls: true }] } },
  });
  const node = await createNode({ config, logger });
  const traces = await node.runUntil(async () => {
    const jobs = await Promise.all([
      start(config, 'b/1', { tenant: 'acme', steps: [session('acme.txt')] }),
      start(config, 'b_1', { tenant: 'beta', steps: [session('beta.txt')] }),
    ]);
    const root = nodeRoot(config, node.identity.queue, 'sessions');
    // Both harnesses have written their file before either lists its folder.
    const written = () =>
      fs.existsSync(root) ? jobFolders(root).flatMap((d) => fs.readdirSync(path.join(root, d))) : [];
    await eventually(() => (written().length === 2 ? true : undefined), 60_000, 'both sessions’ files');
    const folders = jobFolders(root).sort();
    fs.writeFileSync(flag, '');
    return { folders, results: (await Promise.all(jobs.map((j) => j.result()))) as JobTrace[] };
  });
  const ls = (trace: JobTrace) =>
    (trace.steps.filter(isSessionTrace)[0].result!.structuredContent as { ls: string[] }).ls;
  expect(ls(traces.results[0])).toEqual(['acme.txt']);
  expect(ls(traces.results[1])).toEqual(['beta.txt']);
  expect(traces.folders).toEqual(
    [
      sessionFolderName({ tenant: 'acme', jobId: 'b/1' }, 's1', 1),
      sessionFolderName({ tenant: 'beta', jobId: 'b_1' }, 's1', 1),
    ].sort(),
  );
});
