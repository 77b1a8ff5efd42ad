/**
 * The workflow bundle. `npm run build` writes it once (`node dist/worker/bundle.js`), and a node loads that file:
 * webpack never runs inside a node, where bundling would hold well over 100 MB for the node's whole life and slow
 * its start. Without a current file (tests from sources, a build from before a change), the node bundles itself.
 */
import fs from 'node:fs';
import path from 'node:path';
import { bundleWorkflowCode } from '@temporalio/worker';
import type { WorkflowBundleOption } from '@temporalio/worker';
import { createLogger, TemporalPinoLogger } from '../common/logger';

/** Next to the compiled workflows: dist/workflow-bundle.js. */
export const BUNDLE_FILE = path.join(__dirname, '..', 'workflow-bundle.js');
const WORKFLOWS_DIR = path.join(__dirname, '..', 'workflows');

// The bundler's chatter is info-level; its warnings still show.
const quietBundlerLogger = new TemporalPinoLogger(createLogger({ level: 'warn' }));

function bundleCode(): Promise<{ code: string }> {
  return bundleWorkflowCode({
    workflowsPath: require.resolve('../workflows'),
    // O2: tracing's workflow side is in every bundle, so a job's commands never depend on a node's telemetry (T5).
    workflowInterceptorModules: [require.resolve('../workflows/tracing')],
    logger: quietBundlerLogger,
  });
}

/** The file exists and is newer than every compiled workflow module. */
function current(file: string): boolean {
  try {
    const built = fs.statSync(file).mtimeMs;
    return fs
      .readdirSync(WORKFLOWS_DIR)
      .filter((f) => f.endsWith('.js'))
      .every((f) => fs.statSync(path.join(WORKFLOWS_DIR, f)).mtimeMs <= built);
  } catch {
    return false;
  }
}

let bundle: Promise<WorkflowBundleOption> | undefined;

/** The workflow bundle, loaded (or built) once per process and shared by every node in it. */
export function workflowBundle(): Promise<WorkflowBundleOption> {
  bundle ??= current(BUNDLE_FILE) ? Promise.resolve({ codePath: BUNDLE_FILE }) : bundleCode();
  return bundle;
}

if (require.main === module) {
  bundleCode()
    .then(({ code }) => {
      fs.writeFileSync(BUNDLE_FILE, code);
      process.stdout.write(`workflow bundle: ${path.relative(process.cwd(), BUNDLE_FILE)} (${code.length} bytes)\n`);
    })
    .catch((err: unknown) => {
      console.error(err);
      process.exit(1);
    });
}
