/**
 * SPEC D2: what a folder store holds goes with the job's history. Each object lies under its job
 * (`<owner>/v0/ns/<namespace>/wt/<type>/wi/<job>/…`): a job's folder is removed once Temporal no longer has the job —
 * the namespace's retention deleted its history — and nothing in it was written for a while. A job id taken again
 * keeps the folder until its latest run is gone too. An S3 store is swept by a lifecycle rule per tenant prefix
 * (docs/data.md).
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Client } from '@temporalio/client';
import { WorkflowNotFoundError } from '@temporalio/client';

/** A folder written this recently is never swept (a job whose start is still on its way). */
const QUIET_MS = 60 * 60_000;

export interface Swept {
  jobs: number;
  files: number;
}

/** Removes the folders of the namespace's jobs Temporal no longer has. `objects` is the folder store's bucket folder. */
export async function sweepFolder(objects: string, client: Client, now = Date.now()): Promise<Swept> {
  const swept: Swept = { jobs: 0, files: 0 };
  const namespace = encodeURIComponent(client.options.namespace).replace(/~/g, '%7E');
  for (const owner of entries(objects)) {
    const types = path.join(objects, owner, 'v0', 'ns', namespace, 'wt');
    for (const type of entries(types)) {
      const jobs = path.join(types, type, 'wi');
      for (const job of entries(jobs)) {
        const folder = path.join(jobs, job);
        if (now - newestWrite(folder) < QUIET_MS) continue;
        if (!(await gone(client, decodeURIComponent(job.replace(/^%2E/, ''))))) continue;
        swept.files += files(folder);
        fs.rmSync(folder, { recursive: true, force: true });
        swept.jobs++;
      }
    }
  }
  return swept;
}

async function gone(client: Client, jobId: string): Promise<boolean> {
  try {
    await client.workflow.getHandle(jobId).describe();
    return false;
  } catch (err) {
    return err instanceof WorkflowNotFoundError;
  }
}

function entries(folder: string): string[] {
  try {
    return fs.readdirSync(folder);
  } catch {
    return [];
  }
}

/** The latest write under a folder (ms), its own included. */
function newestWrite(folder: string): number {
  let newest = fs.statSync(folder).mtimeMs;
  for (const entry of fs.readdirSync(folder, { recursive: true, withFileTypes: true })) {
    if (entry.isFile()) newest = Math.max(newest, fs.statSync(path.join(entry.parentPath, entry.name)).mtimeMs);
  }
  return newest;
}

function files(folder: string): number {
  return fs.readdirSync(folder, { recursive: true, withFileTypes: true }).filter((e) => e.isFile()).length;
}

/** How often a node sweeps its folder store. */
const SWEEP_EVERY_MS = 60 * 60_000;

/** Sweeps a folder store now and every hour after, saying what it removed; returns the stop. */
export function sweepEveryHour(
  objects: string,
  client: Client,
  say: (swept: Swept) => void,
  failed: (err: Error) => void,
): () => void {
  let running: Promise<void> | undefined;
  const sweep = () => {
    running ??= sweepFolder(objects, client)
      .then((swept) => {
        if (swept.jobs > 0) say(swept);
      })
      .catch(failed)
      .finally(() => (running = undefined));
  };
  const first = setTimeout(sweep, 60_000);
  const every = setInterval(sweep, SWEEP_EVERY_MS);
  first.unref();
  every.unref();
  return () => {
    clearTimeout(first);
    clearInterval(every);
  };
}
