/**
 * The local cluster's binaries, built from their Go modules into `.tools/` at pinned versions and reused when
 * present: the Temporal server and its SQL schema tool (with the module's PostgreSQL schemas copied beside them),
 * and the Temporal UI server. A fresh machine takes a few minutes for the server; the UI is optional.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { GO_TOOLCHAIN, TEMPORAL_SERVER_VERSION, TEMPORAL_UI_VERSION } from './settings';
import { projectRoot } from '../../common/paths';

export interface ClusterTools {
  server: string;
  sql: string;
  /** Holds postgresql/v12/{temporal,visibility}/versioned. */
  schemaDir: string;
  /** Undefined when the UI server could not be built (the cluster runs without it). */
  ui?: string;
}

export interface ToolOptions {
  root: string;
  /** One progress line for a person: the slow steps say what they do and that they still do it. */
  say: (line: string) => void;
  /** Where the go command's own output goes. */
  logFile: string;
}

const ModuleSchema = z.object({ Dir: z.string().min(1) });

function executable(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** u+w on a tree, folders first so that their entries can be reached. */
function writable(dir: string): void {
  fs.chmodSync(dir, 0o755);
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const file = path.join(dir, entry.name);
    if (entry.isDirectory()) writable(file);
    else fs.chmodSync(file, 0o644);
  }
}

/** Runs the go command with the pinned toolchain (in `cwd`, a module of oz0's own); its output goes to the log. */
export function go(args: string[], env: Record<string, string>, logFile: string, cwd?: string): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      'go',
      args,
      {
        env: { ...process.env, GOTOOLCHAIN: process.env.GOTOOLCHAIN ?? GO_TOOLCHAIN, ...env },
        maxBuffer: 64 * 2 ** 20,
        ...(cwd ? { cwd } : {}),
      },
      (err, stdout, stderr) => {
        fs.appendFileSync(logFile, `$ go ${args.join(' ')}\n${stderr}`);
        if (err) reject(new Error(`go ${args.join(' ')} failed (see ${logFile}): ${stderr.trim().split('\n').pop()}`));
        else resolve(stdout);
      },
    );
  });
}

/** The go command in a module folder of oz0's own (a tool whose module `go install` refuses). */
export function goIn(args: string[], cwd: string, logFile: string): Promise<string> {
  return go(args, {}, logFile, cwd);
}

/** `go install` into `bin`, saying every 30 s that it still runs. */
async function install(what: string, pkgs: string[], bin: string, opts: ToolOptions): Promise<void> {
  const started = Date.now();
  opts.say(`building ${what} with Go (${GO_TOOLCHAIN}); a few minutes on a fresh machine, output in ${opts.logFile}`);
  const ticker = setInterval(
    () => opts.say(`still building ${what} (${Math.round((Date.now() - started) / 1000)} s)`),
    30_000,
  );
  try {
    fs.mkdirSync(bin, { recursive: true });
    await go(['install', ...pkgs], { GOBIN: bin }, opts.logFile);
  } finally {
    clearInterval(ticker);
  }
  opts.say(`built ${what} in ${Math.round((Date.now() - started) / 1000)} s`);
}

export async function ensureTools(opts: ToolOptions): Promise<ClusterTools> {
  const serverHome = path.join(opts.root, '.tools', 'temporal-server', TEMPORAL_SERVER_VERSION);
  const uiHome = path.join(opts.root, '.tools', 'temporal-ui', TEMPORAL_UI_VERSION);
  const tools: ClusterTools = {
    server: path.join(serverHome, 'bin', 'server'),
    sql: path.join(serverHome, 'bin', 'sql'),
    schemaDir: path.join(serverHome, 'schema'),
  };
  fs.mkdirSync(path.dirname(opts.logFile), { recursive: true });
  const module = `go.temporal.io/server@v${TEMPORAL_SERVER_VERSION}`;
  if (!executable(tools.server) || !executable(tools.sql)) {
    const pkgs = ['cmd/server', 'cmd/tools/sql'].map((p) => `go.temporal.io/server/${p}@v${TEMPORAL_SERVER_VERSION}`);
    await install(`the Temporal server ${TEMPORAL_SERVER_VERSION}`, pkgs, path.join(serverHome, 'bin'), opts);
  }
  if (!fs.existsSync(path.join(tools.schemaDir, 'postgresql', 'v12'))) {
    // The schemas ship in the module, not in the binaries: copy them next to the tool that applies them.
    const info = ModuleSchema.parse(JSON.parse(await go(['mod', 'download', '-json', module], {}, opts.logFile)));
    const target = path.join(tools.schemaDir, 'postgresql', 'v12');
    fs.cpSync(path.join(info.Dir, 'schema', 'postgresql', 'v12'), target, { recursive: true });
    // The module cache is read-only, and so is a copy of it: make ours writable, so that rm -rf .tools works.
    writable(target);
  }
  const ui = path.join(uiHome, 'bin', 'server');
  if (!executable(ui)) {
    try {
      const pkg = `github.com/temporalio/ui-server/v2/cmd/server@v${TEMPORAL_UI_VERSION}`;
      await install(`the Temporal UI server ${TEMPORAL_UI_VERSION}`, [pkg], path.join(uiHome, 'bin'), opts);
    } catch (err) {
      opts.say(`no Temporal UI: ${(err as Error).message}`);
      return tools;
    }
  }
  return { ...tools, ui };
}

/** `node dist/deploy/local-cluster/go-tools.js`: builds the cluster's binaries ahead of `npm run cluster` (.ci/run). */
if (require.main === module) {
  const root = projectRoot();
  ensureTools({
    root,
    say: (line) => process.stderr.write(`${line}\n`),
    logFile: path.join(root, '.tools', 'temporal-server', 'go-build.log'),
  })
    .then((tools) => process.stdout.write(`${tools.server}${tools.ui ? ` (UI ${tools.ui})` : ' (no UI)'}\n`))
    .catch((err: unknown) => {
      console.error((err as Error).message);
      process.exit(1);
    });
}
