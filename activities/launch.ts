/**
 * How a stdio server's or a harness's command is found, wherever the config was copied: relative paths in it are
 * resolved against the config file's folder (the node's working directory plays no part), and a missing command or
 * script is named, with the server or harness it belongs to, before anything is started.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { LoadedConfig } from '../common/config';
import { executableFile } from '../common/paths';
import { resolveCommand } from '../common/process-group';

export interface Launch {
  command: string;
  args: string[];
}

/** An argument that names a script its command runs: it must be there. */
const SCRIPT = /^[^\s'"]+\.(?:[cm]?js|[cm]?ts|py)$/;

/**
 * The command and its arguments, relative paths beside the config made absolute: a command with a slash in it
 * (`./bin/server`), and each argument that names a file or folder there (`dist/examples/ledger.js`). A process may run
 * in a folder of its own (a sandbox, a harness session), so nothing relies on its working directory.
 */
export function besideConfig(baseDir: string, launch: Launch): Launch {
  const command =
    launch.command.includes('/') && !path.isAbsolute(launch.command)
      ? path.resolve(baseDir, launch.command)
      : launch.command;
  const args = launch.args.map((arg) => {
    const candidate = path.resolve(baseDir, arg);
    return !path.isAbsolute(arg) && fs.existsSync(candidate) ? candidate : arg;
  });
  return { command, args };
}

/**
 * Why `who` (`server "ledger"`, `harness "refunds"`) cannot start with this launch (made {@link besideConfig}), in
 * words; undefined when its command and its script are there. A bare command is looked up on the node's PATH, as it
 * is when started.
 */
export function launchProblem(
  who: string,
  config: Pick<LoadedConfig, 'baseDir' | 'source'>,
  launch: Launch,
  pathEnv = process.env.PATH ?? '',
): string | undefined {
  const rule = `relative paths in ${config.source === 'defaults' ? 'the config' : config.source} are resolved against its folder, ${config.baseDir}`;
  const { command } = launch;
  if (!command.includes('/') && resolveCommand(command, pathEnv) === command) {
    return `${who} cannot start: its command "${command}" is not on the PATH`;
  }
  if (command.includes('/') && !executableFile(command)) {
    return `${who} cannot start: its command ${command} is not an executable file (${rule})`;
  }
  const script = launch.args.find((arg) => SCRIPT.test(arg));
  const scriptPath = script && path.resolve(config.baseDir, script);
  if (scriptPath && !fs.existsSync(scriptPath)) {
    return `${who} cannot start: its script ${script} is not there (looked for ${scriptPath}; ${rule})`;
  }
  return undefined;
}

/** Every stdio server and harness of the config that cannot start here, in words: a node warns of them at start. */
export function launchProblems(config: LoadedConfig, pathEnv = process.env.PATH ?? ''): string[] {
  const stdio = Object.entries(config.servers).flatMap(([name, s]) =>
    // A server named by its package is checked when the node installs it (./packages.ts).
    'command' in s && !s.package ? [[`server "${name}"`, s] as const] : [],
  );
  const harnesses = Object.entries(config.harnesses).map(([name, h]) => [`harness "${name}"`, h] as const);
  return [...stdio, ...harnesses].flatMap(([who, launch]) => {
    const problem = launchProblem(who, config, besideConfig(config.baseDir, launch), pathEnv);
    return problem ? [problem] : [];
  });
}
