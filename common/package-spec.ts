/**
 * S1: a server named by its package — `npm:@scope/name@1.2.3`, `pypi:name==1.2.3` — pinned to one exact version, as
 * its registry publishes it. The node installs it (activities/packages.ts); nothing fetches a package at run time.
 */
import { z } from 'zod';

export interface PackageSpec {
  registry: 'npm' | 'pypi';
  name: string;
  version: string;
  /** As the config writes it. */
  spec: string;
}

/** npm's package names: lower case, an optional scope, at most 214 characters. */
const NPM_NAME = /^(?:@[a-z0-9][a-z0-9._~-]*\/)?[a-z0-9][a-z0-9._~-]*$/;
/** An exact semantic version: no range, no tag. */
const SEMVER = /^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$/;
/** PyPI's project names (PEP 508). */
const PYPI_NAME = /^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$/;
/** One public PEP 440 version: no wildcard, no range. */
const PEP440 = /^(?:\d+!)?\d+(?:\.\d+)*(?:(?:a|b|rc)\d+)?(?:\.post\d+)?(?:\.dev\d+)?$/i;

const PINNED =
  'a package is "npm:<name>@<exact version>" or "pypi:<name>==<exact version>": one version, as the registry has it (a range or a tag would install whatever the registry says that day)';

/** The package a spec names, or why it names none. */
export function parsePackageSpec(spec: string): PackageSpec | { problem: string } {
  if (spec.startsWith('npm:')) {
    const rest = spec.slice(4);
    const at = rest.lastIndexOf('@');
    if (at <= 0) return { problem: `${PINNED}; ${JSON.stringify(spec)} names no version` };
    const name = rest.slice(0, at);
    const version = rest.slice(at + 1);
    if (name.length > 214 || !NPM_NAME.test(name))
      return { problem: `${JSON.stringify(name)} is not an npm package name` };
    if (!SEMVER.test(version)) return { problem: `${PINNED}; ${JSON.stringify(version)} is not one exact version` };
    return { registry: 'npm', name, version, spec };
  }
  if (spec.startsWith('pypi:')) {
    const [name, version, ...more] = spec.slice(5).split('==');
    if (version === undefined || more.length) return { problem: `${PINNED}; ${JSON.stringify(spec)} names no version` };
    if (!PYPI_NAME.test(name)) return { problem: `${JSON.stringify(name)} is not a PyPI project name` };
    if (!PEP440.test(version)) return { problem: `${PINNED}; ${JSON.stringify(version)} is not one exact version` };
    return { registry: 'pypi', name, version, spec };
  }
  return { problem: PINNED };
}

export const PackageSpecSchema = z.string().transform((spec, ctx): PackageSpec => {
  const parsed = parsePackageSpec(spec);
  if ('problem' in parsed) {
    ctx.addIssue({ code: 'custom', message: parsed.problem });
    return z.NEVER;
  }
  return parsed;
});

/**
 * A package's own digest, when the config pins it beyond its version (as an image is pinned by digest): npm's
 * `integrity` (`sha512-…`), or the sha256 of the PyPI file (`sha256:<hex>`).
 */
export const IntegritySchema = z
  .string()
  .regex(
    /^(?:sha512-[A-Za-z0-9+/]{86}==|sha256:[0-9a-f]{64})$/,
    'npm\'s integrity ("sha512-…"), or the PyPI file\'s "sha256:<64 hex digits>"',
  );

/**
 * Programs that fetch a package when they run (`npx -y @scope/server`, `uvx mcp-server-…`): a sandbox has no network
 * for them, and what they fetch is whatever the registry says that day.
 */
const FETCHERS: Record<string, 'npm' | 'pypi'> = {
  npx: 'npm',
  pnpx: 'npm',
  bunx: 'npm',
  uvx: 'pypi',
  pipx: 'pypi',
};

/** S1: why a sandboxed server's command that fetches its package at run time is refused, with what to write instead. */
export function fetcherProblem(command: string, args: readonly string[]): string | undefined {
  const base = command.split('/').at(-1) ?? command;
  const runs =
    FETCHERS[base] ??
    (base === 'npm' && args[0] === 'exec' ? 'npm' : undefined) ??
    (base === 'uv' && args[0] === 'tool' && args[1] === 'run' ? 'pypi' : undefined);
  if (!runs) return undefined;
  const named = args.find((a) => !a.startsWith('-') && !['exec', 'tool', 'run'].includes(a));
  const pinned = named && (runs === 'npm' ? named.lastIndexOf('@') > 0 : named.includes('=='));
  const example = pinned
    ? `"package": "${runs}:${named}"`
    : runs === 'npm'
      ? `"package": "npm:${named ?? '<name>'}@<version>"`
      : `"package": "pypi:${named ?? '<name>'}==<version>"`;
  return `${base} fetches its package when it runs, and a sandbox has no network for it: name the server by its package, ${example}, with its own arguments in "args"; the node installs it once, pinned and checked (S1)`;
}
