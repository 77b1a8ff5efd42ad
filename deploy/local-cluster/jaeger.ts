/**
 * Jaeger, the tracing backend the docs and `npm run cluster -- --observe` use (SPEC O2), built from its Go module at
 * a pinned version into `.tools/jaeger/<version>/jaeger` and reused when present. Its module has replace directives,
 * so `go install pkg@version` refuses it: it is built as a tool of a module of its own (`go get -tool`), as the
 * library's package list says. `npm run jaeger:install` prints the binary's path.
 *
 * Jaeger 1.75.0 is the approved release; the newer versions the proxy serves are not.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { projectRoot } from '../../common/paths';
import { GO_TOOLCHAIN } from './settings';

export const JAEGER_VERSION = '1.75.0';
const PACKAGE = 'github.com/jaegertracing/jaeger/cmd/jaeger';

function run(args: string[], cwd: string, logFile: string): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile(
      'go',
      args,
      { cwd, env: { ...process.env, GOTOOLCHAIN: process.env.GOTOOLCHAIN ?? GO_TOOLCHAIN }, maxBuffer: 64 * 2 ** 20 },
      (err, _stdout, stderr) => {
        fs.appendFileSync(logFile, `$ go ${args.join(' ')}\n${stderr}`);
        if (err) reject(new Error(`go ${args.join(' ')} failed (see ${logFile}): ${stderr.trim().split('\n').pop()}`));
        else resolve();
      },
    );
  });
}

/** The Jaeger binary, built once (a few minutes on a fresh machine); `say` tells a person what is going on. */
export async function ensureJaeger(root = projectRoot(), say: (line: string) => void = () => undefined) {
  const home = path.join(root, '.tools', 'jaeger', JAEGER_VERSION);
  const bin = path.join(home, 'jaeger');
  if (fs.existsSync(bin)) return bin;
  const module = path.join(home, 'module');
  fs.mkdirSync(module, { recursive: true });
  const logFile = path.join(home, 'build.log');
  say(`building Jaeger ${JAEGER_VERSION} with Go; a few minutes on a fresh machine, output in ${logFile}`);
  if (!fs.existsSync(path.join(module, 'go.mod'))) await run(['mod', 'init', 'oz0.local/jaeger'], module, logFile);
  await run(['get', '-tool', `${PACKAGE}@v${JAEGER_VERSION}`], module, logFile);
  await run(['build', '-o', bin, PACKAGE], module, logFile);
  return bin;
}

if (require.main === module) {
  ensureJaeger(projectRoot(), (line) => process.stderr.write(`${line}\n`))
    .then((bin) => process.stdout.write(`${bin}\n`))
    .catch((err: unknown) => {
      console.error((err as Error).message);
      process.exit(1);
    });
}
