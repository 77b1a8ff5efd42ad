/**
 * The workflow bundle. `npm run build` writes it once (`node dist/worker/bundle.js`), and a node loads that file:
 * webpack never runs inside a node, where bundling would hold well over 100 MB for the node's whole life and slow
 * its start. Without a current file (tests from sources, a build from before a change), the node bundles itself.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { WorkflowBundleOption } from '@temporalio/worker';
import type * as TemporalWorker from '@temporalio/worker';
import type * as Logging from '../common/logger';
import { buildIdOf, codeDigest } from '../common/release';

/**
 * This module running from its TypeScript sources (the tests, under ts-jest) rather than from dist/: it still loads
 * the build's bundle, when that is newer than every source it was made of, instead of bundling again in every test
 * file that starts a node (webpack: seconds of CPU each time, on a machine the whole suite shares).
 */
const FROM_SOURCES = path.extname(__filename) === '.ts';
const ROOT = path.join(__dirname, '..');
const OUT_DIR = FROM_SOURCES ? path.join(ROOT, 'dist') : ROOT;

/** Next to the compiled workflows: dist/workflow-bundle.js, and dist/workflow-bundle-traced.js for a node that traces. */
export const BUNDLE_FILE = path.join(OUT_DIR, 'workflow-bundle.js');
export const TRACED_BUNDLE_FILE = path.join(OUT_DIR, 'workflow-bundle-traced.js');
/** What a bundle is made of: the workflows and the model they import, as sources or compiled, as this module runs. */
const INPUT_DIRS = ['workflows', 'model'].map((dir) => path.join(ROOT, dir));
const INPUT_EXT = FROM_SOURCES ? '.ts' : '.js';

/**
 * O2: tracing's workflow side (workflows/tracing.ts) goes only into the bundle of a node that traces: it puts each
 * span's context in the headers of what the workflow schedules, bytes a node that exports nothing need not send. It
 * is oz0's own, not Temporal's OpenTelemetry interceptors, whose context manager, tracer and open spans in every
 * cached job cost a node ~570 MiB at 500 running calls (`npm run bench -- --only memory`: 1,005 MiB against 440).
 * Both bundles make the same commands — the interceptors add headers, which replay does not compare — so a job moves
 * between traced and untraced nodes freely (T5): test/unit/replay.test.ts replays every recorded history, traced
 * (by Temporal's interceptors, before issue 36) or not, under both.
 */
async function bundleCode(traced: boolean): Promise<{ code: string }> {
  // Loaded only to bundle: `oz0 worker --version` reads the built bundles without the SDK (or pino).
  /* eslint-disable @typescript-eslint/no-require-imports */
  const { bundleWorkflowCode } = require('@temporalio/worker') as typeof TemporalWorker;
  const { createLogger, TemporalPinoLogger } = require('../common/logger') as typeof Logging;
  /* eslint-enable @typescript-eslint/no-require-imports */
  const { code } = await bundleWorkflowCode({
    workflowsPath: require.resolve('../workflows'),
    // D4: failures' messages and stacks as payloads, which the codecs seal (model/failure-converter.ts).
    failureConverterPath: require.resolve('../model/failure-converter'),
    // Issue 36.3: evaluated once, when the workflow thread starts, and shared by every cached job; without it each job
    // evaluates all of oz0's workflow modules and their dependencies again (~55 KB a job, 28 MiB at 500 running calls).
    // Safe while no module of workflows/ or model/ keeps state at its top level (test/unit/workflow-modules.test.ts).
    preloadModules: [require.resolve('../workflows')],
    ...(traced ? { workflowInterceptorModules: [require.resolve('../workflows/tracing')] } : {}),
    // The bundler's chatter is info-level; its warnings still show.
    logger: new TemporalPinoLogger(createLogger({ level: 'warn' })),
  });
  return { code: latin1(code) };
}

/**
 * The bundle with every character past U+00FF written as its `\uXXXX` escape (issue 36.3). V8 keeps a string of
 * Latin-1 characters in one byte each and any other in two: the 21 dashes, ellipses and arrows of comments and messages
 * doubled the bundle's 2.2 million characters to 4.3 MB, held twice (the node's copy, the workflow thread's source).
 * They stand in comments, strings and untagged templates, where an escape means the same character.
 */
export function latin1(code: string): string {
  return code.replace(/[\u0100-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** The file exists and is newer than every module it was made of. */
function current(file: string): boolean {
  try {
    const built = fs.statSync(file).mtimeMs;
    return INPUT_DIRS.every((dir) =>
      fs
        .readdirSync(dir)
        .filter((f) => f.endsWith(INPUT_EXT))
        .every((f) => fs.statSync(path.join(dir, f)).mtimeMs <= built),
    );
  } catch {
    return false;
  }
}

/** A bundle as a node's worker takes it, and the digest of its code (the same whether read from its file or made). */
interface Loaded {
  option: WorkflowBundleOption;
  digest: string;
}

const bundles = new Map<boolean, Promise<Loaded>>();

/** A bundle, with tracing's workflow side or without, loaded (or built) once per process. */
function load(traced: boolean): Promise<Loaded> {
  let bundle = bundles.get(traced);
  if (!bundle) {
    const file = traced ? TRACED_BUNDLE_FILE : BUNDLE_FILE;
    bundle = current(file)
      ? fs.promises.readFile(file).then((code) => ({ option: { codePath: file }, digest: codeDigest(code) }))
      : bundleCode(traced).then(({ code }) => ({ option: { code }, digest: codeDigest(code) }));
    bundles.set(traced, bundle);
  }
  return bundle;
}

/** The workflow bundle, with tracing's workflow side or without, loaded (or built) once per process. */
export async function workflowBundle(traced = false): Promise<WorkflowBundleOption> {
  return (await load(traced)).option;
}

/**
 * The build id of the workflow code this process runs (issue 56): a digest of both bundles, the one without tracing
 * and the one with it, as the node would load them. Both, so that a traced and an untraced node of one build say one
 * id — a job moves between them freely (T5), as it must between the nodes of one build id once Worker Versioning pins
 * it to one — and the id changes when either bundle does. A node run from a stale build or from its sources bundles
 * both itself (seconds of webpack, once per process): its code is not the built one, and its id says so.
 */
export async function workflowBuildId(): Promise<string> {
  // One after the other: two webpack runs at once would hold both their peaks.
  const plain = await load(false);
  const traced = await load(true);
  return buildIdOf([plain.digest, traced.digest]);
}

if (require.main === module) {
  (async () => {
    for (const [traced, file] of [
      [false, BUNDLE_FILE],
      [true, TRACED_BUNDLE_FILE],
    ] as const) {
      const { code } = await bundleCode(traced);
      fs.writeFileSync(file, code);
      process.stdout.write(`workflow bundle: ${path.relative(process.cwd(), file)} (${code.length} bytes)\n`);
    }
  })().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
