/** A failure and its causes, outermost first (at most `depth` of them): what a failure's words are read from. */
export function* causesOf(err: unknown, depth = 6): Generator<Error> {
  for (let e = err, n = 0; e instanceof Error && n < depth; e = e.cause, n++) yield e;
}

/**
 * The innermost cause's words (`SignatureDoesNotMatch: The request signature …`), and the HTTP status a cause carries
 * (the AWS SDK's `$metadata`: an S3 HEAD refused has no body to name its error): what went wrong, under the wraps.
 */
export function rootWords(err: unknown): string {
  const causes = [...causesOf(err)];
  const root = causes.at(-1);
  if (!root) return String(err);
  const status = causes
    .map((e) => (e as { $metadata?: { httpStatusCode?: unknown } }).$metadata?.httpStatusCode)
    .find((code) => typeof code === 'number');
  const name = root.name && root.name !== 'Error' && root.name !== 'Unknown' ? `${root.name}: ` : '';
  return `${status ? `HTTP ${status}: ` : ''}${name}${root.message}`;
}
