/** `./bin/oz0` as a user runs it, from the repository root: its exit code and what it printed. */
import { execFile } from 'node:child_process';
import path from 'node:path';
import type { PluginTestReport } from '../../plugin/drill/report';
import { ROOT, sealedWithFileKeys } from './temporal';

/** The CLI's config file is given the test file's keys unless it names its own sealing (D4), as its nodes' are. */
export function oz0(
  args: string[],
  env?: Record<string, string>,
): Promise<{ code: number; stdout: string; stderr: string }> {
  const at = args.indexOf('--config');
  if (at >= 0 && args[at + 1]) sealedWithFileKeys(args[at + 1]);
  return new Promise((resolve) => {
    const opts = { cwd: ROOT, timeout: 80_000, ...(env && { env: { ...process.env, ...env } }) };
    execFile(path.join(ROOT, 'bin', 'oz0'), args, opts, (err, stdout, stderr) =>
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

/** `oz0 plugin test SERVER --json` against a config file, and its report. */
export async function pluginTestCli(
  configFile: string,
  server: string,
  ...more: string[]
): Promise<{ code: number; report: PluginTestReport }> {
  const out = await oz0(['plugin', 'test', server, '--json', '--config', configFile, ...more]);
  if (!out.stdout) throw new Error(`oz0 plugin test ${server} printed nothing (exit ${out.code}): ${out.stderr}`);
  return { code: out.code, report: JSON.parse(out.stdout) as PluginTestReport };
}
