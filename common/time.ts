/** Times as Temporal's protobuf answers carry them. */

/** A `google.protobuf.Timestamp` as Temporal sends it (a history event's `eventTime`); `seconds` a Long or a number. */
export type Timestamp = { seconds?: unknown; nanos?: number | null } | null | undefined;

/** A timestamp in ms since the epoch, keeping the fraction of a ms (timings read from a history need it); NaN when absent. */
export function timestampMs(ts: Timestamp): number {
  if (!ts) return NaN;
  return Number(ts.seconds ?? 0) * 1000 + (ts.nanos ?? 0) / 1e6;
}
