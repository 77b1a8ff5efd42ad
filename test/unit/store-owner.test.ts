/**
 * Who holds a claim on a key, and whether it lives (K1 across processes): the store takes a claim over only when
 * its owner is dead, so a live owner taken for dead would run a key twice, and a dead one taken for alive would
 * leave its key busy.
 */
import { spawnSync } from 'node:child_process';
import { NO_OWNER, ownerAlive, procStartTime, thisProcess } from '../../plugin/kit/store-owner';
import type { ClaimHolder, Owner } from '../../plugin/kit/store-owner';

const me = thisProcess();
const now = 1_000_000;
const staleMs = 1000;
/** A pid that existed a moment ago and whose process has exited. */
const deadPid = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], {
  encoding: 'utf8',
}).stdout;

test('K1: on Linux this process is named by boot id, pid namespace, pid and the start time in /proc', () => {
  expect(me.kernel).toMatch(/^[0-9a-f-]{36}\/pid:\[\d+\]$/);
  expect(me.pid).toBe(process.pid);
  expect(me.start).toBe(procStartTime(process.pid));
});

const cases: Array<[string, ClaimHolder, Owner, boolean]> = [
  ['this process, however old its seen_at', { ...me, seenAt: 0 }, me, true],
  [
    'a live pid of this namespace with another start time (a reused pid)',
    { ...me, start: '1', seenAt: now },
    me,
    false,
  ],
  ['a pid of this namespace that has exited', { ...me, pid: Number(deadPid), seenAt: now }, me, false],
  ['a claim given up after a failed record', { ...NO_OWNER, seenAt: now }, me, false],
  ['another namespace, refreshed within staleMs', { ...me, kernel: 'other/pid:[1]', seenAt: now - 900 }, me, true],
  ['another namespace, not refreshed for staleMs', { ...me, kernel: 'other/pid:[1]', seenAt: now - 1000 }, me, false],
  [
    'no /proc here: the same host, its pid gone',
    { ...me, kernel: '', pid: Number(deadPid), seenAt: now },
    { ...me, kernel: '' },
    false,
  ],
  [
    'no /proc here: the same host, its pid alive, refreshed',
    { ...me, kernel: '', seenAt: now },
    { ...me, kernel: '' },
    true,
  ],
  [
    'no /proc here: the same host, its pid alive, stale',
    { ...me, kernel: '', seenAt: 0 },
    { ...me, kernel: '' },
    false,
  ],
];

test.each(cases)('K1: %s', (_what, holder, self, alive) => {
  expect(ownerAlive(holder, now, staleMs, self)).toBe(alive);
});
