/**
 * The release before this one, as an operator still runs it mid-upgrade (A12, N6): its commit is named here alone,
 * checked out of this repository's history into `.tools/previous/<commit>/` and built there with this checkout's
 * node_modules (its dependencies are a subset of ours), once; later runs find it built. The tests that run it
 * (test/integration/previous-*.test.ts, rollback-histories.test.ts) and the chaos run's upgrade drill build it here.
 */
import { execFileSync, execSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { projectRoot } from '../common/paths';

/** The last commit of the release before this one (before the inbox, A8-A9). */
export const PREVIOUS_RELEASE = '604e9d3189efa31c496a3613d68c96abc05b23ec';

const BUILT = '.oz0-built';

/** The previous release's folder, built (its `bin/oz0`, its `dist/`), or why there is none here. */
export function previousRelease(): { dir: string } | { why: string } {
  const ROOT = projectRoot();
  const dir = path.join(ROOT, '.tools', 'previous', PREVIOUS_RELEASE);
  if (fs.existsSync(path.join(dir, BUILT))) return { dir };
  try {
    execFileSync('git', ['-C', ROOT, 'cat-file', '-e', `${PREVIOUS_RELEASE}^{commit}`], { stdio: 'ignore' });
  } catch {
    return {
      why: `the previous release's commit ${PREVIOUS_RELEASE.slice(0, 7)} is not in this clone (a shallow one? git fetch --unshallow)`,
    };
  }
  // Built beside its place and renamed in: two test workers building at once each finish, one keeps its build.
  const partial = `${dir}.${randomBytes(4).toString('hex')}.partial`;
  fs.mkdirSync(partial, { recursive: true });
  try {
    execSync(
      `git -C ${JSON.stringify(ROOT)} archive --format=tar ${PREVIOUS_RELEASE} | tar -x -C ${JSON.stringify(partial)}`,
    );
    fs.symlinkSync(path.join(ROOT, 'node_modules'), path.join(partial, 'node_modules'));
    const run = (args: string[]) => execFileSync(process.execPath, args, { cwd: partial, stdio: 'pipe' });
    run([path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.build.json']);
    run(['dist/worker/bundle.js']);
    fs.writeFileSync(path.join(partial, BUILT), `${new Date().toISOString()}\n`);
    try {
      fs.renameSync(partial, dir);
    } catch {
      // Another worker's build got there first.
    }
  } catch (err) {
    const said = String((err as { stderr?: Buffer }).stderr ?? '').trim();
    throw new Error(
      `the previous release ${PREVIOUS_RELEASE.slice(0, 7)} did not build: ${said || (err as Error).message}`,
    );
  } finally {
    fs.rmSync(partial, { recursive: true, force: true });
  }
  return { dir };
}
