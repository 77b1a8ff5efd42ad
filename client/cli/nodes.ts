/** `oz0 dev` (the embedded default: a dev server plus one node) and `oz0 worker` (one node). */
import fs from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import type { Oz0Node } from '../../worker/node';
import { UsageError, config, portArg, print, withConfig } from './common';
import type { ConfigOpts } from './common';

/** Runs a node until SIGINT/SIGTERM, then shuts it down (and runs `also` after). */
async function runUntilSignal(node: Oz0Node, also?: () => Promise<void>): Promise<void> {
  const running = node.run();
  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
    running.finally(stop).catch(() => undefined);
  });
  await node.shutdown();
  try {
    await running;
  } finally {
    await also?.();
  }
}

/**
 * Issue 56: the release and the build id a node of this oz0 runs as, read as a node reads them (the build's files;
 * its bundles made anew only where the build's are older than their sources), with nothing started or connected.
 */
export async function printRelease(json: boolean | undefined): Promise<void> {
  const [{ readRelease, releaseText }, { workflowBuildId }] = await Promise.all([
    import('../../common/release.js'),
    import('../../worker/bundle.js'),
  ]);
  const release = { ...readRelease(), buildId: await workflowBuildId() };
  const { name, version, commit, dirty, buildId } = release;
  print(
    { release: name, version, commit: commit ?? null, dirty: !!dirty, buildId },
    json,
    () => `oz0 ${releaseText(release)}`,
  );
}

export function registerNodeCommands(program: Command): void {
  withConfig(program.command('dev'))
    .description('the embedded default: a Temporal dev server (SQLite file, Web UI) plus one node')
    .option('--port <port>', 'gRPC port of the dev server (default: from temporal.address, else 7233)', portArg)
    .option('--ui-port <port>', 'port of the Web UI (default: gRPC port + 1000)', portArg)
    .option('--db <file>', 'SQLite file (default: <stateDir>/temporal.db)')
    .action(async (opts: ConfigOpts & { port?: number; uiPort?: number; db?: string }) => {
      const cfg = await config(opts);
      const [{ createLogger }, { startDevServer }, { createNode }, { findTemporalCli }, { releaseText }] =
        await Promise.all([
          import('../../common/logger.js'),
          import('../../worker/dev-server.js'),
          import('../../worker/node.js'),
          import('../../worker/temporal-cli.js'),
          import('../../common/release.js'),
        ]);
      const logger = createLogger();
      const [host, portText] = cfg.temporal.address.split(':');
      const port = opts.port ?? Number(portText ?? 7233);
      const state = path.resolve(cfg.baseDir, cfg.node.stateDir);
      fs.mkdirSync(state, { recursive: true });
      // D5: with an inbox in the config, the UI decodes through its codec server, for the person signed in there.
      const inbox = cfg.inbox;
      const inboxUrl = inbox
        ? (inbox.publicUrl?.replace(/\/+$/, '') ??
          `http://${['0.0.0.0', '::'].includes(inbox.host) ? '127.0.0.1' : inbox.host}:${inbox.port}`)
        : undefined;
      const server = await startDevServer({
        cli: findTemporalCli({ log: (line) => logger.info(line) }),
        ip: host === 'localhost' ? '127.0.0.1' : host,
        port,
        uiPort: opts.uiPort ?? port + 1000,
        dbFile: path.resolve(opts.db ?? path.join(state, 'temporal.db')),
        logFile: path.join(state, 'temporal-server.log'),
        namespace: cfg.temporal.namespace,
        uiCodec: inboxUrl,
      });
      cfg.temporal.address = server.address;
      const node = await createNode({ config: cfg, logger });
      process.stderr.write(
        `oz0 dev: Temporal at ${server.address}, Web UI at ${server.uiUrl}/namespaces/${cfg.temporal.namespace}/workflows\n` +
          `oz0 dev: one node on task queue ${cfg.temporal.taskQueue}, release ${releaseText(node.release)}; Ctrl-C stops both\n` +
          (inboxUrl
            ? `oz0 dev: the Web UI opens sealed payloads through the approvals inbox at ${inboxUrl}/ (run \`oz0 inbox --temporal-ui ${server.uiUrl}\` and sign in: each person reads the tenants that name them)\n`
            : `oz0 dev: payloads are sealed per tenant, and the Web UI shows them sealed: with an inbox in the config (inbox.oidc), its signed-in people read theirs decoded there (docs/data.md)\n`),
      );
      await runUntilSignal(node, () => server.stop());
    });

  withConfig(program.command('worker'))
    .description('one node: serves the shared task queue, its own and the policy queue, and its harnesses’ gateway')
    .option('--name <name>', 'name of this node in traces (default: host/pid)')
    .option('--version', 'print the release and build id this node would run, and exit: nothing starts or connects')
    .option('--json', 'with --version: as JSON')
    .action(async (opts: ConfigOpts & { name?: string; version?: boolean; json?: boolean }) => {
      if (opts.version) return printRelease(opts.json);
      if (opts.json) throw new UsageError('--json goes with --version');
      const cfg = await config(opts);
      const [{ createLogger }, { createNode }, { releaseText }] = await Promise.all([
        import('../../common/logger.js'),
        import('../../worker/node.js'),
        import('../../common/release.js'),
      ]);
      const node = await createNode({ config: cfg, logger: createLogger(), name: opts.name });
      process.stderr.write(
        `oz0 worker: node ${node.identity.id} on ${cfg.temporal.address} (${cfg.temporal.taskQueue}), release ${releaseText(node.release)}\n`,
      );
      await runUntilSignal(node);
    });
}
