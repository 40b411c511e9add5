/** Bearer-token checks for operator and voice endpoints: constant-time, and closed when no token is configured. */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { NextFunction, Request, RequestHandler, Response } from 'express';

function sameSecret(a: string, b: string): boolean {
  const h = (s: string) => createHash('sha256').update(s).digest();
  return timingSafeEqual(h(a), h(b));
}

/** Bearer-token guard; no token configured means the endpoints are closed (never open by default). */
export function bearerGuard(token: string | undefined): RequestHandler {
  return (req: Request, res: Response, next: NextFunction) => {
    const sent = /^Bearer +(.+)$/i.exec(req.get('authorization') ?? '')?.[1]?.trim(); // any case (RFC 9110), as client keys
    if (!token || !sent || !sameSecret(sent, token)) {
      res.status(401).json({ error: 'unauthorized: send Authorization: Bearer <token>' });
      return;
    }
    next();
  };
}
