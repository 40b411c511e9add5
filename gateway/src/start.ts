/**
 * Starting and stopping a gateway process (`npm start`, bin/gateway.ts): the gateway on $PORT
 * (default 8080), with the Cold worker in the same process (WORKER=off leaves the worker to
 * `npm run worker`). With nothing configured it answers from the built-in demo providers, and its
 * first log lines say what it is using.
 */
import type { Server } from 'node:http';
import type { Logger } from 'pino';
import { ConfigError } from './errors';
import { readEnv } from './env';
import { createLogger } from './log';
import { holdHangups, onSignals, trackRequests } from './shutdown';
import { createStack } from './stack';
import { onDatabaseRefused } from './stores';

/**
 * A request cut at the end of the grace meters its call (CLIENT_CLOSED) only after its connection
 * closed: a stop waits this long for that before the meter closes, or the call goes unbilled. Cut
 * requests only unwind, so 2 s is ample, and it keeps SIGTERM inside Kubernetes' 30 s (25 s, 0.5 s for cut streams to end, 2 s).
 */
const SETTLE_MS = 2_000;

export async function start(env: NodeJS.ProcessEnv = process.env): Promise<Server> {
  holdHangups();
  const settings = readEnv(env); // first: a bad LOG_LEVEL is named like any other bad value
  const log = createLogger(settings.LOG_LEVEL);
  const stack = await createStack(env, log, { http: true, worker: settings.WORKER !== 'off' });
  if (stack.redis) onDatabaseRefused(stack.redis, (error) => fail(error));
  if (!stack.worker) logNoWorker(log, Boolean(settings.QUEUE_STORE_URL));
  const server = await stack.gateway!.listen(settings.PORT).catch((error: NodeJS.ErrnoException) => {
    // The likeliest first-run problem (a second `npm start` on 8080): named as a setting, not a stack trace.
    if (error.code === 'EADDRINUSE')
      throw new ConfigError(`PORT: ${settings.PORT} is in use by another process (another gateway?): set PORT to a free port`);
    if (error.code === 'EACCES') throw new ConfigError(`PORT: ${settings.PORT} needs privileges this process does not have`);
    throw error;
  });
  const drain = trackRequests(server);
  log.info(`gateway listening on :${(server.address() as { port: number }).port}`);
  // SIGTERM: stop accepting, let requests and streams in flight finish, then flush the meter and
  // close the stores. The worker's running jobs get the same grace, side by side: one still
  // running at its end has its call cut and metered, and is handed back to another worker.
  const stop = async () => {
    log.info(`shutting down: finishing requests and running jobs (up to ${settings.SHUTDOWN_GRACE_MS} ms), flushing meter events`);
    const [finished] = await Promise.all([
      drain.close(settings.SHUTDOWN_GRACE_MS, () => stack.cutStreams()),
      stack.worker?.close(settings.SHUTDOWN_GRACE_MS),
    ]);
    if (!finished) log.warn('shutdown: requests still running at the end of the grace period were cut');
    if (!(await stack.idle(SETTLE_MS)))
      log.warn(`shutdown: requests not finished ${SETTLE_MS} ms after being cut; their meter events may be missing`);
    await stack.close();
    process.exit(0);
  };
  // SIGHUP: reload the routing map (a refused map is logged with its file and JSON path; the old one stays).
  onSignals(log, stop, () => stack.routes.reload());
  return server;
}

/**
 * WORKER=off, said at start: without Redis the queue is this process's own, so no `npm run worker`
 * can take its jobs; they are answered 202 and never run (a gateway that needs no Cold tier, a bench, may want that).
 */
function logNoWorker(log: Logger, redis: boolean): void {
  if (redis) log.info('worker: not in this process (WORKER=off): queued jobs wait for `npm run worker` on this Redis');
  else
    log.warn(
      'worker: not in this process (WORKER=off), and without QUEUE_STORE_URL no `npm run worker` can reach this queue: queued jobs never run',
    );
}

/** `what`: the process that did not start, as its operator started it (`npm run worker` is no gateway). */
export function fail(error: unknown, what: 'gateway' | 'worker' = 'gateway'): never {
  const message = error instanceof ConfigError ? error.message : ((error as Error).stack ?? String(error));
  process.stderr.write(`${what} did not start:\n${message}\n`);
  process.exit(1);
}
