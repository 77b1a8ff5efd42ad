/**
 * How a node's watch reads a tenant's policy off the policy workflow's history (C5): a run's input, every accepted
 * update's result, the next run, the end. The payloads are checked: a history that does not carry a policy state
 * is an error, never a state. tests/integration/policy follows a real workflow's history.
 */
import { defaultPayloadConverter } from '@temporalio/common';
import { policyEventEffect } from '../../activities/policy/watch';
import { emptyState } from '../../model/policy-rules';

const payloads = (value: unknown) => ({ payloads: [defaultPayloadConverter.toPayload(value)] });

test('a run starts with its seed, or with the state the run before it carried over', () => {
  expect(
    policyEventEffect({
      workflowExecutionStartedEventAttributes: { input: payloads({ tenant: 'acme', seed: { 'ledger.*': 'deny' } }) },
    }),
  ).toEqual({ state: emptyState({ 'ledger.*': 'deny' }) });
  const carried = { version: 7, policy: { 'a.b': 'allow' }, kills: ['c.*'], approvals: {} };
  expect(
    policyEventEffect({
      workflowExecutionStartedEventAttributes: { input: payloads({ tenant: 'acme', state: carried }) },
    }),
  ).toEqual({ state: carried });
  expect(
    policyEventEffect({ workflowExecutionStartedEventAttributes: { input: payloads({ tenant: 'acme' }) } }),
  ).toEqual({ state: emptyState() });
});

test("an accepted update's result is the new state; a refused one changes nothing", () => {
  const state = { version: 2, policy: {}, kills: ['reader.*'], approvals: {} };
  expect(
    policyEventEffect({ workflowExecutionUpdateCompletedEventAttributes: { outcome: { success: payloads(state) } } }),
  ).toEqual({ state });
  expect(
    policyEventEffect({
      workflowExecutionUpdateCompletedEventAttributes: { outcome: { failure: { message: 'bad pattern' } } },
    }),
  ).toBeUndefined();
});

test('the next run and the end of the workflow are told apart; other events say nothing', () => {
  expect(policyEventEffect({ workflowExecutionContinuedAsNewEventAttributes: { newExecutionRunId: 'run-2' } })).toEqual(
    { continuedAs: 'run-2' },
  );
  expect(policyEventEffect({ workflowExecutionTerminatedEventAttributes: {} })).toEqual({ closed: 'terminated' });
  expect(policyEventEffect({ workflowExecutionCompletedEventAttributes: {} })).toEqual({ closed: 'completed' });
  expect(policyEventEffect({ workflowTaskCompletedEventAttributes: {} })).toBeUndefined();
  expect(policyEventEffect({ workflowExecutionUpdateAcceptedEventAttributes: {} })).toBeUndefined();
});

test('a payload that is not a policy state is refused, naming what is wrong', () => {
  expect(() =>
    policyEventEffect({
      workflowExecutionUpdateCompletedEventAttributes: {
        outcome: { success: payloads({ version: 1, policy: { 'a.b': 'maybe' }, kills: [], approvals: {} }) },
      },
    }),
  ).toThrow(/maybe|allow/);
  expect(() =>
    policyEventEffect({ workflowExecutionUpdateCompletedEventAttributes: { outcome: { success: payloads('ok') } } }),
  ).toThrow();
  expect(() => policyEventEffect({ workflowExecutionStartedEventAttributes: {} })).toThrow(/payload/);
});
