/** C1 (issue 36.4): what a followed job's history event says to the node (activities/call/job-follows.ts). */
import { eventFor } from '../../activities/call/job-follows';

test("C1: a job's cancel request is its cancel; its run's every end (continued as new too) ends the follow; the rest says nothing", () => {
  expect(eventFor({ workflowExecutionCancelRequestedEventAttributes: { cause: 'anyone' } })).toBe('cancel');
  for (const end of [
    'workflowExecutionCompletedEventAttributes',
    'workflowExecutionFailedEventAttributes',
    'workflowExecutionTimedOutEventAttributes',
    'workflowExecutionCanceledEventAttributes',
    'workflowExecutionTerminatedEventAttributes',
    'workflowExecutionContinuedAsNewEventAttributes',
  ])
    expect(eventFor({ [end]: {} })).toBe('end');
  // A signal, whatever it says, is not a cancel: only Temporal writes WorkflowExecutionCancelRequested.
  expect(eventFor({ workflowExecutionSignaledEventAttributes: { signalName: 'cancel' } })).toBeUndefined();
  expect(eventFor({ activityTaskCancelRequestedEventAttributes: {} })).toBeUndefined();
  expect(eventFor({})).toBeUndefined();
});
