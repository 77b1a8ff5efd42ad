/**
 * S1 (issue 45.1): a server named by its package is pinned to one version the config can say, and a sandboxed server
 * whose command fetches its package when it runs (`npx -y …`, `uvx …`) is refused with the config, pointing to `package`.
 */
import { ConfigError, parseConfig } from '../../common/config';
import { fetcherProblem, parsePackageSpec } from '../../common/package-spec';

function configError(servers: Record<string, unknown>): string {
  try {
    parseConfig({ servers });
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as Error).message;
  }
  throw new Error('the config was taken');
}

test.each([
  [
    'npm:@modelcontextprotocol/server-filesystem@2026.8.31',
    'npm',
    '@modelcontextprotocol/server-filesystem',
    '2026.8.31',
  ],
  ['npm:left-pad@1.3.0', 'npm', 'left-pad', '1.3.0'],
  ['npm:x@1.0.0-beta.2', 'npm', 'x', '1.0.0-beta.2'],
  ['pypi:mcp-server-git==2026.10.19', 'pypi', 'mcp-server-git', '2026.10.19'],
  ['pypi:Some_Project.x==1.0rc1', 'pypi', 'Some_Project.x', '1.0rc1'],
])('S1: %s is one version of one package', (spec, registry, name, version) => {
  expect(parsePackageSpec(spec)).toEqual({ registry, name, version, spec });
});

test.each([
  ['npm:@modelcontextprotocol/server-filesystem', /names no version/],
  ['npm:left-pad@^1.3.0', /"\^1\.3\.0" is not one exact version/],
  ['npm:left-pad@latest', /"latest" is not one exact version/],
  ['npm:Left-Pad@1.0.0', /"Left-Pad" is not an npm package name/],
  ['pypi:mcp-server-git', /names no version/],
  ['pypi:mcp-server-git>=1.0', /names no version/],
  ['pypi:mcp-server-git==1.*', /"1\.\*" is not one exact version/],
  ['pypi:a==1==2', /names no version/],
  ['docker:mcp/git@sha256:abc', /a package is "npm:<name>@<exact version>" or "pypi:<name>==<exact version>"/],
])('S1: %s is refused, saying why', (spec, why) => {
  const parsed = parsePackageSpec(spec);
  expect('problem' in parsed && parsed.problem).toMatch(why);
  expect(configError({ s: { package: spec } })).toMatch(/servers\.s\.package: /);
});

test('S1: npx, uvx and their kin as a sandboxed server’s command are refused, naming what to write instead', () => {
  expect(
    configError({
      fs: { command: 'npx', args: ['-y', '@modelcontextprotocol/server-filesystem', '/data'], sandbox: true },
    }),
  ).toBe(
    'bad config (config): servers.fs.command: npx fetches its package when it runs, and a sandbox has no network for it: name the server by its package, "package": "npm:@modelcontextprotocol/server-filesystem@<version>", with its own arguments in "args"; the node installs it once, pinned and checked (S1)',
  );
  expect(configError({ git: { command: '/usr/local/bin/uvx', args: ['mcp-server-git'], sandbox: {} } })).toMatch(
    /servers\.git\.command: uvx fetches .* "package": "pypi:mcp-server-git==<version>"/,
  );
  expect(fetcherProblem('npm', ['exec', 'x@1.2.3'])).toMatch(/"package": "npm:x@1\.2\.3"/);
  expect(fetcherProblem('uv', ['tool', 'run', 'mcp-server-time'])).toMatch(/"pypi:mcp-server-time==<version>"/);
  // The controls: the same command unsandboxed (the operator's own process, with the node's network), and a program
  // that fetches nothing.
  expect(() => parseConfig({ servers: { fs: { command: 'npx', args: ['-y', 'x'] } } })).not.toThrow();
  expect(fetcherProblem('node', ['npx.js'])).toBeUndefined();
});

test('S1: a package server’s command names one of its programs, its integrity fits its registry', () => {
  expect(configError({ s: {} })).toMatch(/servers\.s\.command: a stdio server names its "command", or its "package"/);
  expect(configError({ s: { package: 'npm:x@1.0.0', command: './bin/x' } })).toMatch(
    /servers\.s\.command: with "package", "command" names one of the package's own programs/,
  );
  expect(configError({ s: { package: 'npm:x@1.0.0', integrity: `sha256:${'a'.repeat(64)}` } })).toMatch(
    /servers\.s\.integrity: an npm package's integrity is "sha512-…"/,
  );
  expect(configError({ s: { command: 'x', integrity: `sha256:${'a'.repeat(64)}` } })).toMatch(
    /servers\.s\.integrity: integrity pins a "package"/,
  );
  const parsed = parseConfig({
    servers: { s: { package: 'pypi:mcp-server-time==2026.10.19', args: ['--local-timezone', 'UTC'] } },
  });
  expect(parsed.servers.s).toMatchObject({
    command: '',
    args: ['--local-timezone', 'UTC'],
    package: { registry: 'pypi' },
  });
});
