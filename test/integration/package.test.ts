/**
 * oz0 as a package a user installs (T1 from outside the repository): `npm pack`, then `npm install <tarball>` in a
 * scratch project of its own; its types (`oz0`, `oz0/plugin`), its CLI, and a node started from the installed package,
 * on its prebuilt workflow bundle, running a job against a real dev server.
 *
 * Dependencies come from npm's cache when it has them (`--prefer-offline`: the repository's own install filled it).
 * Their install scripts are not run (`--ignore-scripts`): what is under test is oz0's package, and better-sqlite3's
 * native build, the slow one, is the repository's own install's to prove.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { callsOf } from '../../model/job';
import type { JobTrace } from '../../model/job';
import { ROOT, tmpDir, useTemporal } from '../helpers/temporal';

const run = promisify(execFile);

const temporal = useTemporal();

/** The environment of a user's shell: none of the npm_* variables `npm test` sets for its own scripts. */
function userEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k)));
  return { ...env, ...extra };
}

/** What the scratch project's TypeScript imports: the names the README and docs/ use, typed through `exports`. */
const CHECK_TS = `import { JobSpecSchema, connectJobClient, jobSummary, loadConfig, startJob, statusQuery } from 'oz0';
import { answerCall, answerCallUpdate, waitingCallsQuery } from 'oz0';
import type { JobSpec, JobTrace, WaitingCall } from 'oz0';
import { busy, idempotencyKey, openKeyStore } from 'oz0/plugin';

const spec: JobSpec = { tenant: 'acme', steps: [{ call: 'reader.echo', args: { text: 'hi' } }] };
export const names = [JobSpecSchema.parse(spec), jobSummary(spec), statusQuery.name, busy, idempotencyKey, openKeyStore];
export async function approveFirst(jc: Awaited<ReturnType<typeof connectJobClient>>, jobId: string) {
  const [call]: WaitingCall[] = await jc.client.workflow.getHandle(jobId).query(waitingCallsQuery);
  const answer = { call: call.activityId, approve: true, by: 'alice' };
  await jc.client.workflow.getHandle(jobId).executeUpdate(answerCallUpdate, { args: [answer] });
  return answerCall(jc.client, jobId, { approve: false, by: 'alice', reason: 'too large' });
}
export async function start(): Promise<JobTrace> {
  const jc = await connectJobClient(loadConfig().temporal);
  return (await startJob(jc, spec)).result();
}
`;

/** The scratch project's program: a node from the installed package, and a job started on it. */
const RUN_JS = `const { connectJobClient, createLogger, createNode, loadConfig, startJob } = require('oz0');
const { idempotencyKey } = require('oz0/plugin');

async function main() {
  const config = loadConfig();
  const node = await createNode({ config, logger: createLogger({ level: 'warn' }) });
  const trace = await node.runUntil(async () => {
    const jc = await connectJobClient(config.temporal);
    try {
      const spec = { tenant: 'acme', steps: [{ call: 'reader.echo', args: { text: 'from a scratch project' } }] };
      return await (await startJob(jc, spec, { workflowId: process.argv[2] })).result();
    } finally {
      await jc.close();
    }
  });
  console.log(JSON.stringify({ trace, plugin: typeof idempotencyKey }));
}
main().catch((err) => {
  console.error(err);
  process.exit(1);
});
`;

test('T1: npm pack, npm install <tarball> in a project outside the repository; it imports oz0 and oz0/plugin with their types, runs a node on the package and starts a job', async () => {
  const packed = tmpDir('oz0-pack-');
  // dist/ is built (npm test builds first): the tarball is what `npm pack` gives, less the rebuild.
  const { stdout } = await run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', packed], {
    cwd: ROOT,
    env: userEnv(),
  });
  const [pack] = JSON.parse(stdout) as { filename: string; files: { path: string }[] }[];
  const files = pack.files.map((f) => f.path);
  for (const shipped of [
    'bin/oz0',
    'dist/index.js',
    'dist/index.d.ts',
    'dist/plugin/index.d.ts',
    'dist/workflow-bundle.js',
    'dist/workflow-bundle-traced.js',
    'dist/examples/reader.js',
    'oz0.config.json',
  ]) {
    expect(files).toContain(shipped);
  }
  expect(files.filter((f) => /^(test|bench|deploy|dist\/bench|dist\/deploy|node_modules)\//.test(f))).toEqual([]);

  const project = tmpDir('oz0-scratch-');
  expect(path.relative(ROOT, project).startsWith('..')).toBe(true);
  fs.writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'scratch', private: true }));
  const install = ['install', path.join(packed, pack.filename), '--prefer-offline', '--ignore-scripts'];
  await run('npm', [...install, '--no-audit', '--no-fund'], { cwd: project, env: userEnv(), timeout: 300_000 });

  // Its types: the docs' imports typecheck in a strict project of the user's own (node16 resolution, `exports`).
  // skipLibCheck as in oz0's own tsconfig: the Temporal SDK's and the MCP SDK's declarations need it.
  fs.writeFileSync(path.join(project, 'check.ts'), CHECK_TS);
  const tsconfig = {
    compilerOptions: {
      module: 'node16',
      moduleResolution: 'node16',
      target: 'ES2022',
      strict: true,
      noEmit: true,
      skipLibCheck: true,
    },
    files: ['check.ts'],
  };
  fs.writeFileSync(path.join(project, 'tsconfig.json'), JSON.stringify(tsconfig));
  await run(process.execPath, [path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', project], {
    cwd: project,
  }).catch((err: { stdout?: string }) => {
    throw new Error(`the scratch project does not typecheck:\n${err.stdout}`);
  });

  // The installed workflow bundle is the one a node loads: no newer workflow module beside it.
  const installed = path.join(project, 'node_modules', 'oz0', 'dist');
  const bundled = fs.statSync(path.join(installed, 'workflow-bundle.js')).mtimeMs;
  const workflows = fs.readdirSync(path.join(installed, 'workflows')).filter((f) => f.endsWith('.js'));
  expect(workflows.filter((f) => fs.statSync(path.join(installed, 'workflows', f)).mtimeMs > bundled)).toEqual([]);

  // A config of the project's own, its server named by a path relative to it, inside the installed package.
  const config = {
    temporal: {
      address: temporal.server.address,
      namespace: temporal.server.namespace,
      taskQueue: `scratch-${path.basename(project)}`,
    },
    servers: { reader: { command: 'node', args: ['node_modules/oz0/dist/examples/reader.js'] } },
  };
  fs.writeFileSync(path.join(project, 'oz0.config.json'), JSON.stringify(config));
  fs.writeFileSync(path.join(project, 'run.js'), RUN_JS);
  const jobId = `scratch-${Date.now()}`;
  const ran = await run(process.execPath, ['run.js', jobId], { cwd: project, env: userEnv(), timeout: 120_000 });
  const { trace, plugin } = JSON.parse(ran.stdout) as { trace: JobTrace; plugin: string };
  expect(plugin).toBe('function');
  expect(trace.status).toBe('COMPLETED');
  expect(callsOf(trace).map((s) => [s.tool, s.key, s.result.content])).toEqual([
    ['reader.echo', `${jobId}/c1`, [{ type: 'text', text: 'from a scratch project' }]],
  ]);
  // Temporal recorded it: the package's CLI reads the job back.
  const status = await run(path.join(project, 'node_modules', '.bin', 'oz0'), ['job', 'status', jobId], {
    cwd: project,
    env: userEnv(),
  });
  expect(status.stdout.trim()).toBe('COMPLETED');
  expect((await temporal.client.workflow.getHandle(jobId).describe()).status.name).toBe('COMPLETED');
}, 600_000);
