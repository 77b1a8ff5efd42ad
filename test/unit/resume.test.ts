/** P3-P6 as pure rules: which tokens count, and what a later attempt sends and says. */
import { resumePlan } from '../../activities/call/resume';
import { resumeTokenOf } from '../../model/protocol';

test.each([
  ['shard:2', true],
  ['a.b_c:~+/=-9', true],
  ['x'.repeat(256), true],
  ['x'.repeat(257), false],
  ['', false],
  ['has space', false],
  ['ünïcode', false],
])('P3: token %j is valid: %s', (token, valid) => {
  expect(resumeTokenOf({ 'oz0/resume': token })).toEqual(valid ? { token } : { invalid: true });
});

test('P3: no token, or a token that is not a string', () => {
  expect(resumeTokenOf(undefined)).toBeUndefined();
  expect(resumeTokenOf({})).toBeUndefined();
  expect(resumeTokenOf({ 'oz0/resume': 7 })).toEqual({ invalid: true });
});

const prior = { attempts: [], token: 't:2', tokenProgress: { progress: 2, total: 4 } };

test.each([
  [{ attempt: 1, kind: 'remote', declaresResume: true, prior }, {}],
  [
    { attempt: 2, kind: 'remote', declaresResume: true, prior },
    { meta: { token: 't:2', progress: 2 }, note: 'resumed from progress 2 of 4' },
  ],
  [
    {
      attempt: 2,
      kind: 'remote',
      declaresResume: true,
      prior: { attempts: [], token: 't', tokenProgress: { progress: 3 } },
    },
    { meta: { token: 't', progress: 3 }, note: 'resumed from progress 3' },
  ],
  [
    { attempt: 2, kind: 'remote', declaresResume: false, prior },
    { note: 'started over: the server does not take resume' },
  ],
  [
    { attempt: 2, kind: 'remote', declaresResume: true, prior: { attempts: [] } },
    { note: 'started over: no token reported' },
  ],
  [
    { attempt: 2, kind: 'remote', declaresResume: true, prior: { attempts: [], invalidToken: true } },
    { note: 'started over: the token was invalid' },
  ],
  [
    { attempt: 3, kind: 'plugin', declaresResume: true, prior },
    { note: 'started over: a plugin server’s shared session takes no resume token' },
  ],
  [
    { attempt: 2, kind: 'sandbox', declaresResume: true, prior },
    { note: 'started over: only a remote server resumes' },
  ],
] as const)('P4-P6: resumePlan(%j)', (input, plan) => {
  expect(resumePlan({ ...input, prior: { ...input.prior, attempts: [] } })).toEqual(plan);
});
