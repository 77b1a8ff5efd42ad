/**
 * The AWS SDK's S3 client as oz0 makes it, for its S3 store and for the tools that look into one (the local cluster,
 * the tests, the bench): path-style when an endpoint is named (what S3-compatible servers want), and without the
 * SDK's notice that its later releases need Node.js 22 — oz0 pins the release it runs, and the notice would land in
 * the CLI's output and the demo's.
 */
import { S3Client } from '@aws-sdk/client-s3';

export interface S3Where {
  endpoint?: string;
  region?: string;
  forcePathStyle?: boolean;
  credentials?: { accessKeyId: string; secretAccessKey: string };
  /** Attempts per request (the SDK's default is 3). */
  maxAttempts?: number;
}

export function newS3Client(where: S3Where): S3Client {
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
  return new S3Client({
    region: where.region ?? 'us-east-1',
    ...(where.endpoint ? { endpoint: where.endpoint } : {}),
    forcePathStyle: where.forcePathStyle ?? where.endpoint !== undefined,
    ...(where.credentials ? { credentials: where.credentials } : {}),
    ...(where.maxAttempts ? { maxAttempts: where.maxAttempts } : {}),
  });
}
