/**
 * Request bodies and JSON answers on plain node:http, for the chat endpoint's hot path (which
 * does not go through Express). What Express's json parser did for that path is done here: a
 * 20 MB limit (413), gzip/deflate/br bodies inflated (another coding → 415), a charset other than
 * UTF-8 refused (415) and a leading byte-order mark read past, and a body that is not JSON, by its
 * Content-Type or its text → 400 (a body that is not a valid request is a 400, never a 500). Every
 * answer is written with one writeHead (headers and length at once).
 */
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { createBrotliDecompress, createGunzip, createInflate } from 'node:zlib';
import { withoutBom } from './json-object';

const MAX_BODY_BYTES = 20 * 1024 * 1024;
/**
 * Deeper bodies are refused: later steps (the idempotency key's JSON.stringify, the provider's
 * request) recurse and would overflow the stack on a small body nested thousands deep. Real
 * requests nest a few levels, tool JSON schemas some dozens; 128 leaves them room.
 */
const MAX_DEPTH = 128;
const OPENERS = [0x5b, 0x7b]; // [ {

export type BodyResult = { ok: true; value: unknown } | { ok: false; status: 400 | 413 | 415; message: string };

const JSON_TYPE = /^application\/(?:[\w.+-]*\+)?json\s*(?:;|$)/i;
/** Whether a request body's Content-Type is JSON (`application/json`, or any `application/…+json`). */
export const isJsonBodyType = (type: string): boolean => JSON_TYPE.test(type);
/** The refusal of a body of another Content-Type, naming it. */
export const notJson = (type: string): string => `Content-Type: expected application/json, got "${type.slice(0, 100)}"`;
const CHARSET = /;\s*charset\s*=\s*(?:"([^"]*)"|([^;\s]*))/i;
const UTF8 = /^utf-?8$/i;
const DECODERS: Record<string, () => NodeJS.ReadWriteStream> = {
  gzip: createGunzip,
  'x-gzip': createGunzip,
  deflate: createInflate,
  br: createBrotliDecompress,
};

/** Refused before reading: the body is drained (so the connection can be reused) and not kept. */
function refuse(req: IncomingMessage, status: 400 | 413 | 415, message: string): Promise<BodyResult> {
  req.resume();
  return Promise.resolve({ ok: false, status, message });
}

/** The body is decoded as UTF-8 only: another charset read as UTF-8 would reach the provider garbled. */
function charsetRefusal(type: string): string | null {
  const match = CHARSET.exec(type);
  const charset = match ? (match[1] ?? match[2]) : undefined;
  if (charset === undefined || UTF8.test(charset)) return null;
  return `Content-Type: unsupported charset "${charset.slice(0, 50)}" (expected utf-8)`;
}

/** Whether containers nest more than `levels` deep; it recurses at most `levels + 1` calls. */
function deeperThan(value: unknown, levels: number): boolean {
  if (typeof value !== 'object' || value === null) return false;
  if (levels === 0) return true;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) if (deeperThan(value[i], levels - 1)) return true;
    return false;
  }
  for (const key in value) if (deeperThan((value as Record<string, unknown>)[key], levels - 1)) return true;
  return false;
}

/** Fewer brackets than levels cannot nest that deep: most bodies skip the walk (this is the hot path). */
function mayNestDeeper(bytes: Buffer): boolean {
  let brackets = 0;
  for (const open of OPENERS)
    for (let i = bytes.indexOf(open); i !== -1; i = bytes.indexOf(open, i + 1)) if (++brackets > MAX_DEPTH) return true;
  return false;
}

function parseBody(bytes: Buffer): BodyResult {
  let value: unknown;
  try {
    value = JSON.parse(withoutBom(bytes.toString('utf8'))); // as Express's json parser does on the other paths
  } catch {
    return { ok: false, status: 400, message: 'body: expected a JSON object' };
  }
  if (mayNestDeeper(bytes) && deeperThan(value, MAX_DEPTH))
    return { ok: false, status: 400, message: `body: nested deeper than ${MAX_DEPTH} levels` };
  return { ok: true, value };
}

/** Reads and parses a JSON request body. Never rejects: a bad body is a result with its status. */
export function readJsonBody(req: IncomingMessage, limit = MAX_BODY_BYTES): Promise<BodyResult> {
  const type = req.headers['content-type'];
  // No Content-Type at all is read as JSON (some clients omit it); any other type is refused.
  if (type !== undefined && !isJsonBodyType(type)) return refuse(req, 400, notJson(type));
  const charset = type === undefined ? null : charsetRefusal(type);
  if (charset) return refuse(req, 415, charset);
  const encoding = (req.headers['content-encoding'] ?? 'identity').trim().toLowerCase();
  // Its own names only: `constructor` or `__proto__` is what every object has, no decoder.
  const decoder = encoding === 'identity' ? null : Object.hasOwn(DECODERS, encoding) ? DECODERS[encoding] : undefined;
  if (decoder === undefined) {
    return refuse(req, 415, `Content-Encoding: expected identity, gzip, deflate or br, got "${encoding.slice(0, 50)}"`);
  }
  const declared = Number(req.headers['content-length']);
  if (declared > limit) return refuse(req, 413, `body: larger than ${limit} bytes`);
  const source: NodeJS.ReadableStream = decoder ? req.pipe(decoder()) : req;
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    const finish = (result: BodyResult) => {
      if (done) return;
      done = true;
      // The request lives as long as its answer (a stream's whole length), and so do these listeners.
      chunks.length = 0;
      resolve(result);
    };
    source.on('data', (chunk: Buffer) => {
      if (done) return;
      size += chunk.length;
      if (size > limit) {
        finish({ ok: false, status: 413, message: `body: larger than ${limit} bytes` });
        req.unpipe();
        req.resume();
        return;
      }
      chunks.push(chunk);
    });
    source.on('end', () => {
      if (done) return;
      finish(parseBody(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size)));
    });
    source.on('error', () =>
      finish({ ok: false, status: 400, message: decoder ? `body: not valid ${encoding} data` : 'body: the request was cut off' }),
    );
    req.on('aborted', () => finish({ ok: false, status: 400, message: 'body: the request was cut off' }));
  });
}

/** One JSON answer: status, headers and body written at once. */
export function sendJson(res: ServerResponse, status: number, value: unknown, headers?: OutgoingHttpHeaders): void {
  sendBody(res, status, JSON.stringify(value), 'application/json; charset=utf-8', headers);
}

/** A client that reads nothing for this long is cut off: what it was sent would be held for as long as it kept the connection. */
export const STALL_MS = 30_000;

/**
 * What is written larger than this goes out in pieces of it, each once the socket took the one
 * before: the socket drains as a slow client reads, so one still reading is not taken for one that
 * stopped, and one that stopped is found.
 */
export const PIECE = 64 * 1024;

/**
 * Resolves when the socket can take more, or is gone: a closed socket never drains, and a client
 * that stopped reading is cut off after `stallMs`, so every way an answer ends ends its writer.
 */
export function writable(res: ServerResponse, stallMs: number): Promise<void> {
  if (res.destroyed || res.writableEnded) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => res.destroy(), stallMs);
    const done = () => {
      clearTimeout(timer);
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}

/**
 * `headers` (a fresh object from the caller) is completed in place with the type and length. A
 * body larger than PIECE goes out in pieces (an embeddings answer can be 100 MB or more).
 */
export function sendBody(
  res: ServerResponse,
  status: number,
  body: string | Buffer,
  contentType: string,
  headers: OutgoingHttpHeaders = {},
  stallMs = STALL_MS,
): void {
  if (res.headersSent || res.destroyed) return;
  const length = typeof body === 'string' ? Buffer.byteLength(body) : body.length;
  headers['content-type'] = contentType;
  headers['content-length'] = length;
  res.writeHead(status, headers);
  if (length <= PIECE) return void res.end(body);
  const bytes = typeof body === 'string' ? Buffer.from(body) : body;
  const last = bytes.length - (bytes.length % PIECE || PIECE); // the last piece ends the response
  void writeInPieces(res, bytes.subarray(0, last), stallMs).then(() => res.destroyed || res.end(bytes.subarray(last)));
}

/** `bytes` in pieces of PIECE, each once the socket took the one before; stops if the response is gone. */
export async function writeInPieces(res: ServerResponse, bytes: Buffer, stallMs: number): Promise<void> {
  for (let at = 0; at < bytes.length && !res.destroyed; at += PIECE)
    if (!res.write(bytes.subarray(at, at + PIECE))) await writable(res, stallMs);
}
