/** A9: who may answer a tenant's calls, as `tenants.<t>.approvers` names them, and the answer's identity's shape. */
import { ApproversSchema, mayAnswer } from '../../common/approvers';
import type { Identity } from '../../common/approvers';
import { answerProblem } from '../../model/checks';

const alice: Identity = {
  issuer: 'https://id.example',
  subject: 'u-1',
  email: 'Alice@Acme.example',
  groups: ['support'],
};
const unverified: Identity = { issuer: 'https://id.example', subject: 'u-2', groups: ['finance'] };

test('A9: an email, a subject or a group names a person; nothing else does', () => {
  expect(mayAnswer(['alice@acme.example'], alice, 'ledger.refund')).toBe(true);
  expect(mayAnswer(['email:alice@acme.example'], alice, 'ledger.refund')).toBe(true);
  expect(mayAnswer(['sub:u-1'], alice, 'ledger.refund')).toBe(true);
  expect(mayAnswer(['group:support'], alice, 'ledger.refund')).toBe(true);
  // An email the provider did not vouch for (none in the identity) names nobody; another group does not either.
  expect(mayAnswer(['bob@acme.example', 'group:finance', 'sub:u-9'], alice, 'ledger.refund')).toBe(false);
  expect(mayAnswer(['alice@acme.example'], unverified, 'ledger.refund')).toBe(false);
  expect(mayAnswer(undefined, alice, 'ledger.refund')).toBe(false);
});

test('A9: per tool pattern, every pattern that matches the call’s tool counts', () => {
  const approvers = ApproversSchema.parse({ 'ledger.refund': ['group:finance'], 'ledger.*': ['alice@acme.example'] });
  expect(mayAnswer(approvers, unverified, 'ledger.refund')).toBe(true);
  expect(mayAnswer(approvers, unverified, 'ledger.charge')).toBe(false);
  expect(mayAnswer(approvers, alice, 'ledger.charge')).toBe(true);
  expect(mayAnswer(approvers, alice, 'tickets.open')).toBe(false);
});

test('A9: approvers that name no one recognisable are refused with the config', () => {
  expect(ApproversSchema.safeParse(['alice']).success).toBe(false);
  expect(ApproversSchema.safeParse(['role:admin']).success).toBe(false);
  expect(ApproversSchema.safeParse({ 'bad pattern!': ['a@b.c'] }).success).toBe(false);
});

test('A9: an answer’s identity is { issuer, subject, email? } and nothing else', () => {
  const base = { approve: true, by: 'alice@acme.example' };
  expect(
    answerProblem({ ...base, identity: { issuer: 'https://id.example', subject: 'u-1', email: 'a@b.c' } }),
  ).toBeUndefined();
  expect(answerProblem({ ...base, identity: { issuer: 'https://id.example' } })).toMatch(/identity is/);
  expect(answerProblem({ ...base, identity: { issuer: 'i', subject: 's', admin: true } })).toMatch(/identity is/);
  expect(answerProblem({ ...base, identity: 'alice' })).toMatch(/identity is/);
});
