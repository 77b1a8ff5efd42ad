/**
 * O2 in its pure part: the span context oz0's workflow side (workflows/tracing.ts) reads from headers and writes into
 * them is the one Temporal's OpenTelemetry interceptors write and read — a job started by their client interceptor
 * joins its caller's trace, and an attempt's span (their activity interceptor) is the child of its step's. Their own
 * helpers and OpenTelemetry's W3C propagator are the other side of each case; a header that is not a valid context is
 * no parent.
 */
import { ROOT_CONTEXT, context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import type { SpanContext } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { defaultPayloadConverter } from '@temporalio/common';
import type { Headers } from '@temporalio/common';
import {
  TRACE_HEADER,
  extractContextFromHeaders,
  headersWithContext,
} from '@temporalio/interceptors-opentelemetry/lib/instrumentation';
import { contextOf, settled, withContext } from '../../workflows/tracing';

beforeAll(() => {
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
});
afterAll(() => {
  propagation.disable();
  context.disable();
});

const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
const spanId = '00f067aa0ba902b7';

/** Headers as Temporal's interceptors write them with a span of this context current. */
function theirs(ctx: SpanContext) {
  return context.with(trace.setSpanContext(ROOT_CONTEXT, ctx), () => headersWithContext({}));
}

test.each([
  ['sampled, no trace state', { traceId, spanId, traceFlags: 1 }],
  ['not sampled', { traceId, spanId, traceFlags: 0 }],
])('O2: a context Temporal’s interceptors put in headers (%s) is read as it was', (_what, ctx) => {
  expect(contextOf(theirs(ctx))).toEqual(ctx);
});

test('O2: a caller’s trace state goes along', () => {
  const carrier = { traceparent: `00-${traceId}-${spanId}-01`, tracestate: 'vendor=a,other=b' };
  const read = contextOf({ [TRACE_HEADER]: defaultPayloadConverter.toPayload(carrier) });
  expect(read).toEqual({ traceId, spanId, traceFlags: 1, traceState: 'vendor=a,other=b' });
});

test('O2: what oz0 writes, Temporal’s activity side reads as the step’s span', () => {
  const step = { context: { traceId, spanId, traceFlags: 1, traceState: 'vendor=a' } };
  const headers = withContext({ other: defaultPayloadConverter.toPayload('kept') }, step);
  expect(headers.other).toBeDefined();
  const read = trace.getSpanContext(extractContextFromHeaders(headers)!);
  expect(read).toMatchObject({ traceId, spanId, traceFlags: 1, isRemote: true });
  expect(read?.traceState?.serialize()).toBe('vendor=a');
});

test.each<[string, Record<string, unknown> | undefined]>([
  ['no header at all', undefined],
  ['a traceparent that is not W3C', { traceparent: 'hello' }],
  ['a version oz0 does not know', { traceparent: `ff-${traceId}-${spanId}-01` }],
  ['an all-zero trace id', { traceparent: `00-${'0'.repeat(32)}-${spanId}-01` }],
  ['an all-zero span id', { traceparent: `00-${traceId}-${'0'.repeat(16)}-01` }],
  ['upper-case hex', { traceparent: `00-${traceId.toUpperCase()}-${spanId}-01` }],
  ['a traceparent that is a number', { traceparent: 7 }],
])('O2: %s: no parent, so the run starts a trace of its own', (_what, carrier) => {
  const headers: Headers = carrier ? { [TRACE_HEADER]: defaultPayloadConverter.toPayload(carrier) } : {};
  expect(contextOf(headers)).toBeUndefined();
  // The positive control: the same shape with a valid traceparent is a parent.
  expect(contextOf(theirs({ traceId, spanId, traceFlags: 1 }))).toBeDefined();
});

/**
 * T5 and O5: a call step's span ends through `settled`, which must hand the step's result on in the very turn of the
 * microtask queue an async function awaiting it would, or the workflow's code after a call could run before or after
 * something else settling in the same activation (an Update, a cancel, another call's result) in a different order
 * than the histories recorded. Each case races the two ways, each awaited by a caller, against a counter of turns.
 */
type Outcome = { kind: 'value'; value: unknown } | { kind: 'error'; error: unknown };
async function asyncWay<T>(fn: () => Promise<T>, ok: () => void, fail: (err: unknown) => void): Promise<T> {
  try {
    const result = await fn();
    ok();
    return result;
  } catch (err) {
    fail(err);
    throw err;
  }
}

/** The turns at which the wrapper's `ok`/`fail` ran and its caller went on, counted from the start. */
async function turnsOf(
  wrap: typeof settled,
  source: () => { fn: () => Promise<unknown>; settle: () => void },
): Promise<string[]> {
  const log: string[] = [];
  let turn = 0;
  let ticking = true;
  const tick = (): void => {
    turn++;
    if (ticking && turn < 50) void Promise.resolve().then(tick);
  };
  void Promise.resolve().then(tick);
  const { fn, settle } = source();
  const caller = (async () => {
    try {
      const value = await wrap(
        fn,
        () => log.push(`ok@${turn}`),
        () => log.push(`fail@${turn}`),
      );
      log.push(`caller value ${String(value)}@${turn}`);
    } catch (err) {
      log.push(`caller error ${String(err)}@${turn}`);
    }
  })();
  settle();
  await caller;
  ticking = false;
  return log;
}

const later = (outcome: Outcome) => () => {
  let settle!: () => void;
  const p = new Promise((resolve, reject) => {
    settle = () => (outcome.kind === 'value' ? resolve(outcome.value) : reject(outcome.error));
  });
  return { fn: () => p, settle };
};
const sources: [string, () => { fn: () => Promise<unknown>; settle: () => void }][] = [
  ['a promise that resolves later', later({ kind: 'value', value: 'r' })],
  ['a promise that rejects later', later({ kind: 'error', error: 'e' })],
  ['a promise already resolved', () => ({ fn: () => Promise.resolve('r'), settle: () => undefined })],
  ['a promise already rejected', () => ({ fn: () => Promise.reject(new Error('e')), settle: () => undefined })],
  [
    'a promise resolved with another promise',
    () => ({ fn: () => new Promise((resolve) => resolve(Promise.resolve('r'))), settle: () => undefined }),
  ],
  ['a plain value', () => ({ fn: () => 'r' as unknown as Promise<unknown>, settle: () => undefined })],
  [
    'a thenable',
    () => ({
      fn: () => ({ then: (resolve: (v: unknown) => void) => resolve('r') }) as unknown as Promise<unknown>,
      settle: () => undefined,
    }),
  ],
  [
    'a synchronous throw',
    () => ({
      fn: () => {
        throw new Error('e');
      },
      settle: () => undefined,
    }),
  ],
];

test.each(sources)(
  'T5: a step’s span ends, and its caller goes on, in the turns an async function takes: %s',
  async (_what, source) => {
    const theirs = await turnsOf(asyncWay, source);
    const ours = await turnsOf(settled, source);
    expect(theirs.length).toBe(2);
    expect(ours).toEqual(theirs);
  },
);

test('T5: a positive control — a wrapper one turn slower is told apart', async () => {
  const slower: typeof settled = async (fn, ok, fail) => {
    const result = await asyncWay(fn, ok, fail);
    return result;
  };
  const source = later({ kind: 'value', value: 'r' });
  expect(await turnsOf(slower, source)).not.toEqual(await turnsOf(asyncWay, source));
});
