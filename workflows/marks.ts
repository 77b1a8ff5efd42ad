/**
 * N6: a change of this release is taken, and its marker written, only where the run may write what a node of the
 * previous release could not run after it (model/job.ts FEATURE_LEVEL). A run of level 0 takes the previous release's
 * way and writes no marker: `patched` is not even asked, so nothing of the change reaches its history.
 */
import { patched } from '@temporalio/workflow';
import { FEATURE_LEVEL } from '../model/job';
import type { JobSettings } from '../model/activities';

export function changed(settings: Pick<JobSettings, 'level'> | undefined, change: string): boolean {
  return (settings?.level ?? 0) >= FEATURE_LEVEL && patched(change);
}
