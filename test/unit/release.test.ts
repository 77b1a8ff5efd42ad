/**
 * Issue 56, "a node says what it is", in pure parts: the build id follows its workflow bundles' content exactly, the
 * release run from the sources is the checkout's, and every series a NodeMetrics serves carries both.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { buildIdOf, codeDigest, readRelease, releaseText } from '../../common/release';
import type { NodeRelease } from '../../common/release';
import { NodeMetrics } from '../../activities/observe/metrics';

const ROOT = path.join(__dirname, '..', '..');
const PLAIN = 'function job() { return 1; }\n';
const TRACED = 'function job() { return 1; }\nfunction tracing() {}\n';
const idOf = (plain: string | Buffer, traced: string | Buffer) => buildIdOf([codeDigest(plain), codeDigest(traced)]);

describe('issue 56: the build id is a digest of the workflow bundles', () => {
  test('issue 56: the same bundles give the same id, from a file’s bytes as from the code bundled in memory', () => {
    expect(idOf(PLAIN, TRACED)).toBe(idOf(PLAIN, TRACED));
    expect(idOf(Buffer.from(PLAIN), Buffer.from(TRACED))).toBe(idOf(PLAIN, TRACED));
    expect(idOf(PLAIN, TRACED)).toMatch(/^[0-9a-f]{12}$/);
  });

  test.each([
    ['one byte of the untraced bundle', PLAIN.replace('1', '2'), TRACED],
    ['one byte of the traced bundle', PLAIN, TRACED.replace('1', '2')],
    ['the bundles swapped', TRACED, PLAIN],
    ['a byte moved from one bundle to the other', PLAIN.slice(0, -1), `\n${TRACED}`],
  ])('issue 56: %s changes it', (_what, plain, traced) => {
    expect(idOf(plain, traced)).not.toBe(idOf(PLAIN, TRACED));
  });
});

test('issue 56: run from its sources, the release is package.json’s version and the checkout’s commit', () => {
  const release = readRelease();
  const { version } = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string };
  const head = execFileSync('git', ['-C', ROOT, 'rev-parse', 'HEAD'], { encoding: 'utf8' }).trim();
  expect(release.version).toBe(version);
  expect(release.commit).toBe(head);
  expect(release.name).toBe(`${version}+${head.slice(0, 12)}${release.dirty ? '.dirty' : ''}`);
  expect(releaseText({ ...release, buildId: 'abc' })).toContain(`(commit ${head}`);
  expect(releaseText({ version, name: `${version}+unknown`, buildId: 'abc' })).toBe(
    `${version}+unknown (commit unknown: built without git), build id abc`,
  );
});

test('issue 56: every series a node serves carries its release and build id, and oz0_build_info names the node', async () => {
  const release: NodeRelease = {
    version: '1.2.3',
    commit: 'a'.repeat(40),
    name: '1.2.3+aaaaaaaaaaaa',
    buildId: 'b'.repeat(12),
  };
  const metrics = new NodeMetrics(4, { node: 'host/1', release });
  metrics.attemptEnded({ tool: 't.f', server: 't', tenant: 'acme', outcome: 'ok', seconds: 0.1, final: true });
  const samples = (await metrics.text()).split('\n').filter((l) => l && !l.startsWith('#'));
  expect(samples.length).toBeGreaterThan(20);
  const labels = 'release="1.2.3+aaaaaaaaaaaa",build_id="bbbbbbbbbbbb"';
  expect(samples.filter((l) => !l.includes(labels))).toEqual([]);
  expect(samples).toContain(`oz0_build_info{node="host/1",version="1.2.3",commit="${'a'.repeat(40)}",${labels}} 1`);
});
