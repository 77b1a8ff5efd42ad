/** Temporal's protobuf timestamps in ms: the Long seconds its client decodes, the fraction of a ms kept, none as NaN. */
import { temporal } from '@temporalio/proto';
import { timestampMs } from '../../common/time';

test('a history event time in ms since the epoch, to the fraction of a ms; an absent one is NaN', () => {
  // As the client decodes an event: its seconds a Long.
  const { HistoryEvent } = temporal.api.history.v1;
  const event = HistoryEvent.decode(
    HistoryEvent.encode(
      HistoryEvent.fromObject({ eventTime: { seconds: 1_796_466_763, nanos: 599_250_000 } }),
    ).finish(),
  );
  expect(typeof event.eventTime!.seconds).not.toBe('number');
  expect(timestampMs(event.eventTime)).toBeCloseTo(1_796_466_763_599.25, 3);
  expect(timestampMs({ seconds: 12, nanos: null })).toBe(12_000);
  expect(timestampMs({ nanos: 500_000 })).toBe(0.5);
  expect(timestampMs(null)).toBeNaN();
  expect(timestampMs(undefined)).toBeNaN();
});
