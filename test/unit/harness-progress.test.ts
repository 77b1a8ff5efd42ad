/**
 * A7: what a harness hears of a call that waits for a person: a progress notification at once and every 10 s after,
 * saying so, with progress that increases within the request (MCP) and stays under what the server reports once the
 * call runs; the notices stop when the call goes on or ends.
 */
import { HarnessProgress } from '../../activities/harness/progress';
import type { ProgressParams } from '../../activities/harness/progress';

/** The default of `node.waitingNoticeMs`. */
const WAITING_NOTICE_MS = 10_000;

beforeEach(() => jest.useFakeTimers());
afterEach(() => jest.useRealTimers());

test('A7: a waiting call tells its harness at once and every 10 s, with increasing progress, until it goes on', () => {
  const sent: ProgressParams[] = [];
  const p = new HarnessProgress((params) => sent.push(params), WAITING_NOTICE_MS);
  p.waiting("waiting for a person's yes: oz0 call approve job-1 c2");
  jest.advanceTimersByTime(WAITING_NOTICE_MS * 3);
  expect(sent).toHaveLength(4);
  expect(sent[0]).toEqual({
    progress: 0,
    message: "waiting for a person's yes: oz0 call approve job-1 c2 (waited 0 s)",
  });
  expect(sent[3].message).toMatch(/\(waited 30 s\)$/);
  for (let i = 1; i < sent.length; i++) expect(sent[i].progress).toBeGreaterThan(sent[i - 1].progress);
  expect(sent.every((s) => s.total === undefined && s.progress < 0.001)).toBe(true);
  // Approved: the call goes on, and the server's own progress follows, still increasing.
  p.waiting(undefined);
  jest.advanceTimersByTime(WAITING_NOTICE_MS * 2);
  expect(sent).toHaveLength(4);
  p.progress({ progress: 1, total: 3 });
  p.progress({ progress: 1, total: 3 });
  p.progress({ progress: 2, total: 3 });
  expect(sent.slice(4)).toEqual([
    { progress: 1, total: 3 },
    { progress: 2, total: 3 },
  ]);
});

test('A7: the notices stop when the call ends while it waits (denied, withdrawn, timed out)', () => {
  const sent: ProgressParams[] = [];
  const p = new HarnessProgress((params) => sent.push(params), WAITING_NOTICE_MS);
  p.waiting('waiting');
  p.close();
  jest.advanceTimersByTime(WAITING_NOTICE_MS * 5);
  expect(sent).toHaveLength(1);
});
