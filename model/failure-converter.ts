/**
 * SPEC D4: the failure converter of every oz0 process and of the workflow bundle: Temporal's own, with a failure's
 * message and stack moved into a payload (`encodeCommonAttributes`), so that the payload codecs seal them like any
 * other tenant data — a server's stderr or a tool's error text is the tenant's. Temporal shows such a failure as
 * "Encoded failure" to whoever lacks the key; oz0's clients and the codec server open it.
 */
import { DefaultFailureConverter } from '@temporalio/common';

export const failureConverter = new DefaultFailureConverter({ encodeCommonAttributes: true });
