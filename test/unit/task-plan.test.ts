/**
 * The pure rule of MCP tasks (issues 19.2, 25.3): which calls run as a task, which a server may answer with one, and
 * which are refused before anything is sent.
 */
import { taskPlan, taskSupportOf } from '../../mcp/task';
import type { TaskSupport } from '../../mcp/task';

test.each<[TaskSupport, boolean, boolean, boolean, ReturnType<typeof taskPlan>]>([
  ['forbidden', true, false, false, { as: 'request' }],
  ['optional', true, false, false, { as: 'task' }],
  ['optional', false, false, false, { as: 'request' }],
  ['required', true, false, false, { as: 'task' }],
  ['required', false, false, false, { refused: expect.stringContaining('does not offer tasks for tools/call') }],
  // A task an attempt before made is polled, whatever the listing says now.
  ['forbidden', false, false, true, { as: 'task' }],
  // SEP-2663: a 2026-07-28 listing says nothing of tasks; a server with the extension decides per call.
  ['forbidden', false, true, false, { as: 'may be task' }],
  ['forbidden', false, true, true, { as: 'task' }],
])(
  'a function that says %s, on a server that offers SEP-1686 tasks: %s, the extension: %s, a task before: %s → %j',
  (support, offered, extension, prior, plan) => {
    expect(taskPlan({ support, offered, extension, priorTask: prior })).toEqual(plan);
  },
);

test('a listing without execution.taskSupport is "forbidden", as MCP says', () => {
  expect(taskSupportOf({})).toBe('forbidden');
  expect(taskSupportOf({ execution: { taskSupport: 'required' } })).toBe('required');
});
