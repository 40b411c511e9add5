/** Bearer-token checks for operator and voice endpoints: constant-time, and closed when no token is configured. */
import { createHash, timingSafeEqual } from 'node:crypto';
import express, { type NextFunction, type Request, type RequestHandler, type Response } from 'express';
import { isJsonBodyType, notJson } from './http-io';

function sameSecret(a: string, b: string): boolean {
  const h = (s: string) => createHash('sha256').update(s).digest();
  return timingSafeEqual(h(a), h(b));
}

/**
 * JSON bodies of the operator and voice endpoints, taken as the OpenAI endpoints take theirs
 * (http-io.ts): a body without a Content-Type is read as JSON, one of another type (curl's `-d`
 * sends a form's) is a 400 naming it. Skipped unread, it reached the endpoint as no body at all,
 * whose answer said the body was missing.
 */
const readJson = express.json({ limit: '20mb', type: () => true });

function jsonBody(req: Request, res: Response, next: NextFunction): void {
  const type = req.headers['content-type'];
  const sent = req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length']) > 0;
  if (type !== undefined && isJsonBodyType(type)) return void readJson(req, res, next);
  if (!sent) return next(); // no body: the endpoint says what it needs
  if (type === undefined) return void readJson(req, res, next);
  req.resume();
  next(Object.assign(new Error(notJson(type)), { status: 400 }));
}

/**
 * Bearer-token guard; no token configured means the endpoints are closed (never open by default).
 * Only a caller it lets in has its JSON body read: nobody without the token gets a 20 MB parse,
 * and a path that does not exist answers 404 whatever its body.
 */
export function bearerGuard(token: string | undefined): RequestHandler {
  const guard = tokenGuard(token);
  return (req, res, next) => guard(req, res, (error?: unknown) => (error ? next(error) : jsonBody(req, res, next)));
}

function tokenGuard(token: string | undefined): RequestHandler {
  return (req: Request, res: Response, next: NextFunction) => {
    const sent = /^Bearer +(.+)$/i.exec(req.get('authorization') ?? '')?.[1]?.trim(); // any case (RFC 9110), as client keys
    if (!token || !sent || !sameSecret(sent, token)) {
      res.status(401).json({ error: 'unauthorized: send Authorization: Bearer <token>' });
      return;
    }
    next();
  };
}
