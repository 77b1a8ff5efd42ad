/** The pure rule of MCP tasks (issue 19.2): which calls run as a task, and which are refused before anything is sent. */
import { taskPlan, taskSupportOf } from '../../activities/call/task';
import type { TaskSupport } from '../../activities/call/task';

test.each<[TaskSupport, boolean, boolean, ReturnType<typeof taskPlan>]>([
  ['forbidden', true, false, { as: 'request' }],
  ['optional', true, false, { as: 'task' }],
  ['optional', false, false, { as: 'request' }],
  ['required', true, false, { as: 'task' }],
  ['required', false, false, { refused: expect.stringContaining('does not offer tasks for tools/call') }],
  // A task an attempt before made is polled, whatever the listing says now.
  ['forbidden', false, true, { as: 'task' }],
])(
  'a function that says %s, on a server that offers tasks: %s, a task before: %s → %j',
  (support, offered, prior, plan) => {
    expect(taskPlan({ support, offered, priorTask: prior })).toEqual(plan);
  },
);

test('a listing without execution.taskSupport is "forbidden", as MCP says', () => {
  expect(taskSupportOf({})).toBe('forbidden');
  expect(taskSupportOf({ execution: { taskSupport: 'required' } })).toBe('required');
});
