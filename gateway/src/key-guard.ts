/**
 * Client keys on the HTTP surface (GATEWAY_AUTH=keys): the guard in front of everything Express
 * serves under /v1 (the chat endpoint checks its key itself, on the hot path), and the start-up
 * choice between keys and open. The voice endpoints (/v1/voice/*, /v1/workflow/*) keep their own
 * VOICE_TOKEN; the operator endpoints live outside /v1 with ADMIN_TOKEN.
 */
import type { RequestHandler, Response } from 'express';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import { ClientAuth } from './client-auth';
import type { ClientKey, KeyStore } from './client-keys';
import type { GatewayEnv } from './env';
import { ConfigError } from './errors';
import { sendJson } from './http-io';
import { tenantRefusal } from './key-policy';
import { textHeader } from './request-context';

/** Under /v1 (as Express sees the path below its mount point), and case-insensitive as Express's routing. */
const OWN_TOKEN = /^\/(voice|workflow)(\/|$)/i;

/** For `app.use('/v1', …)`: a valid key goes on in `res.locals`, anything else is answered 401. */
export function keyGuard(auth: ClientAuth): RequestHandler {
  return async (req, res, next) => {
    if (OWN_TOKEN.test(req.path)) return next();
    const checked = auth.check(req.get('authorization'));
    const result = checked instanceof Promise ? await checked : checked;
    if (!result.ok) {
      res
        .status(result.status)
        .set(result.headers ?? {})
        .json(result.error);
      return;
    }
    // As on the model endpoints: a backend that believes it reads another tenant's jobs is told, not answered the key's.
    const refusal = tenantRefusal(result.key, textHeader(req.headers, 'x-customer-id'));
    if (refusal) {
      res.status(refusal.status).json(refusal.error);
      return;
    }
    res.locals.clientKey = result.key;
    next();
  };
}

/** Whether a request URL needs a client key: under /v1 (any case, as Express routes), the voice endpoints aside. */
function needsKey(url: string): boolean {
  const under = /^\/v1(\/[^?]*)?(\?|$)/i.exec(url);
  return under !== null && !OWN_TOKEN.test(under[1] ?? '');
}

/**
 * For node's `checkContinue` (a client that sends `Expect: 100-continue` and waits, as curl does
 * with a large body): a request that needs a key and has no valid one is answered before its body
 * is asked for (and told to `refused`, for the request count); any other is told to send it and
 * goes to `handle` as usual.
 */
export async function continueIfKeyed(
  auth: ClientAuth,
  req: IncomingMessage,
  res: ServerResponse,
  handle: (req: IncomingMessage, res: ServerResponse) => void,
  refused: (req: IncomingMessage, status: number) => void,
): Promise<void> {
  if (needsKey(req.url ?? '')) {
    const checked = auth.check(req.headers.authorization);
    const result = checked instanceof Promise ? await checked : checked;
    if (!result.ok) {
      refused(req, result.status);
      // The body was never asked for: the connection cannot carry another request after it.
      return sendJson(res, result.status, result.error, { ...result.headers, connection: 'close' });
    }
  }
  res.writeContinue();
  handle(req, res);
}

/** The key an Express /v1 request came with; undefined with GATEWAY_AUTH=open. */
export const clientKeyOf = (res: Response): ClientKey | undefined => res.locals.clientKey as ClientKey | undefined;

/** How many keys are valid, if the store answers within 2 s (a start must not hang on it), or why it did not. */
async function activeKeys(store: KeyStore): Promise<number | Error | null> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), 2000)));
  const count = store.list().then(
    (keys) => keys.filter((k) => !k.revoked).length,
    (error: Error) => error,
  );
  const n = await Promise.race([count, late]);
  clearTimeout(timer);
  return n;
}

/** The key check for this gateway, or null when it is open (with the warning that says so). */
export async function startClientAuth(env: GatewayEnv, store: KeyStore, log: Logger): Promise<ClientAuth | null> {
  if (env.GATEWAY_AUTH === 'open') {
    log.warn(
      'GATEWAY_AUTH=open: /v1 takes no client key, so anyone who can reach this port can spend the provider keys; set GATEWAY_AUTH=keys and make keys with `npm run keys -- create <tenant>`',
    );
    return null;
  }
  const found = await activeKeys(store);
  // A keys file that cannot be read is the operator's to mend, as a bad routing map is: started, every client got 503.
  if (found instanceof Error && !env.QUEUE_STORE_URL)
    throw new ConfigError(`CLIENT_KEYS_FILE: ${found.message} (every /v1 request would be refused until it is mended)`);
  const active = typeof found === 'number' ? found : null;
  log.info(`client keys: required on /v1 (GATEWAY_AUTH=keys), kept in ${store.where}${active === null ? '' : `, ${active} valid`}`);
  if (active === 0) log.warn('no valid client key yet: every /v1 request answers 401 until `npm run keys -- create <tenant>`');
  return new ClientAuth(store, { warn: (m) => log.warn(m) }).start();
}
