/** After every test: stop the dev servers global-setup started, one per Jest worker. */
import { stopSharedServers } from './helpers/shared-temporal';

export default async function globalTeardown(): Promise<void> {
  await stopSharedServers();
}
