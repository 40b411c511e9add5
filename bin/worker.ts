/** `npm run worker`: only the Cold worker (several may run at once against one Redis). */
import { holdHangups, onSignals } from '../gateway/src/shutdown';
import { noArguments } from '../gateway/src/no-arguments';

// Before the worker's modules are loaded (its dependencies take a second or more): until then a
// SIGHUP had Node's default and ended the process. They are imported in run(), once it is held.
holdHangups();

async function run(): Promise<void> {
  const [{ readEnv }, { createLogger }, { fail }, { createStack }, { onDatabaseRefused }, { ConfigError }] = await Promise.all([
    import('../gateway/src/env'),
    import('../gateway/src/log'),
    import('../gateway/src/start'),
    import('../gateway/src/stack'),
    import('../gateway/src/stores'),
    import('../gateway/src/errors'),
  ]);
  const settings = readEnv(process.env); // first: a bad LOG_LEVEL is named like any other bad value
  // Without Redis it had only its own empty queue, which nothing fills: it said it was running (and
  // ended at once, or idled), so a supervisor restarted it in a loop. In production the stack refuses it (stores.ts).
  if (!settings.QUEUE_STORE_URL && !settings.production)
    throw new ConfigError(
      "QUEUE_STORE_URL is not set: npm run worker takes queued jobs from the gateway's Redis, so set it to that Redis; " +
        "without Redis the gateway's own worker (npm start, WORKER not off) runs its queued jobs",
    );
  const log = createLogger(settings.LOG_LEVEL);
  const stack = await createStack(process.env, log, { http: false, worker: true });
  if (stack.redis) onDatabaseRefused(stack.redis, (error) => fail(error, 'worker'));
  const graceMs = settings.SHUTDOWN_GRACE_MS;
  const stop = async () => {
    // Jobs still running at the end of the grace are cut (metered) and handed back to another worker.
    log.info(`worker stopping: running jobs finish first (up to ${graceMs} ms)`);
    await stack.worker?.close(graceMs);
    await stack.close();
    process.exit(0);
  };
  // SIGHUP: the routing map again, as the gateway does (a refused map is logged; the old one stays).
  onSignals(log, stop, () => stack.routes.reload());
}

if (noArguments('npm run worker', process.argv.slice(2)))
  run().catch(async (error: unknown) => (await import('../gateway/src/start')).fail(error, 'worker'));
