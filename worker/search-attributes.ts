/** oz0 registers its own search attributes (T3), so a fresh namespace shows jobs' state in the UI. */
import { status as grpcStatus } from '@grpc/grpc-js';
import type { Connection } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { Oz0Status, Oz0Tenant, Oz0Tools } from '../model/job';

const KEYS = [Oz0Status, Oz0Tenant, Oz0Tools];
const TYPE = {
  KEYWORD: temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
  KEYWORD_LIST: temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST,
} as const;

/** Adds whichever of oz0's search attributes the namespace lacks; waits until all are there. */
/** How long one request about search attributes may take. */
const RPC_DEADLINE_MS = 15_000;

export async function ensureSearchAttributes(
  connection: Pick<Connection, 'operatorService' | 'withDeadline'>,
  namespace: string,
): Promise<void> {
  // Each request bounded: a server that never answers fails the node's start, naming why, instead of holding it.
  const bounded = <T>(fn: () => Promise<T>) => connection.withDeadline(Date.now() + RPC_DEADLINE_MS, fn);
  for (let round = 0; round < 40; round++) {
    const existing = await bounded(() => connection.operatorService.listSearchAttributes({ namespace }));
    const known = { ...existing.customAttributes, ...existing.systemAttributes };
    const missing = KEYS.filter((key) => !(key.name in known));
    if (missing.length === 0) return;
    try {
      await bounded(() =>
        connection.operatorService.addSearchAttributes({
          namespace,
          searchAttributes: Object.fromEntries(missing.map((key) => [key.name, TYPE[key.type as keyof typeof TYPE]])),
        }),
      );
    } catch (err) {
      const code = (err as { code?: number }).code;
      // Another node registering at the same moment is fine.
      if (code === grpcStatus.ALREADY_EXISTS) continue;
      if (code === grpcStatus.PERMISSION_DENIED || code === grpcStatus.UNIMPLEMENTED) {
        // Temporal Cloud does not let clients add search attributes: an operator adds them once.
        throw new Error(
          `namespace ${namespace} lacks oz0's search attributes ${missing.map((k) => k.name).join(', ')} and this ` +
            'connection may not add them; add them once, e.g. `tcld namespace search-attributes add` ' +
            '(Oz0Status and Oz0Tenant: Keyword, Oz0Tools: KeywordList)',
        );
      }
      throw err;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`oz0's search attributes did not appear in namespace ${namespace}`);
}
