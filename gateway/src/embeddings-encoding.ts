/**
 * An embeddings answer in the encoding the client asked for (`encoding_format`; OpenAI's default is
 * `float`). Some OpenAI-compatible servers ignore it: floats answered to a request for base64 (the
 * official SDKs' default, which they decode themselves) reach the caller as empty or garbage
 * vectors, base64 answered to a request for floats as a string. Such vectors are re-encoded,
 * base64 as OpenAI's is: float32, little-endian.
 */
import { isObject, jsonText, parseJson } from './json-object';

type Encoding = 'float' | 'base64';

const KEY = Buffer.from('"embedding"');
const SPACE = new Set([0x20, 0x0a, 0x0d, 0x09]);

/** How the first vector of an answer is encoded, read from its bytes (an answer as asked is not parsed). */
function firstEncoding(body: Buffer): Encoding | null {
  for (let at = body.indexOf(KEY); at !== -1; at = body.indexOf(KEY, at + 1)) {
    let i = at + KEY.length;
    while (SPACE.has(body[i])) i++;
    if (body[i] !== 0x3a) continue; // `"object": "embedding"`: a value, not the key
    i++;
    while (SPACE.has(body[i])) i++;
    return body[i] === 0x5b ? 'float' : body[i] === 0x22 ? 'base64' : null;
  }
  return null;
}

function toBase64(vector: number[]): string {
  const bytes = Buffer.alloc(vector.length * 4);
  vector.forEach((x, i) => bytes.writeFloatLE(x, i * 4));
  return bytes.toString('base64');
}

function toFloats(base64: string): number[] {
  const bytes = Buffer.from(base64, 'base64');
  return Array.from({ length: Math.floor(bytes.length / 4) }, (_, i) => bytes.readFloatLE(i * 4));
}

function reencoded(vector: unknown, asked: Encoding): unknown {
  if (asked === 'float') return typeof vector === 'string' ? toFloats(vector) : vector;
  return Array.isArray(vector) && vector.every((x) => typeof x === 'number') ? toBase64(vector) : vector;
}

/**
 * The answer's body with its vectors in the encoding the request asked for. One that cannot be
 * written again (nested too deep, or larger as floats than a string can be) is passed on as it came.
 */
export function inEncodingAsked(body: Buffer, request: Record<string, unknown>): Buffer | string {
  const asked: Encoding = request.encoding_format === 'base64' ? 'base64' : 'float';
  const given = firstEncoding(body);
  if (given === null || given === asked) return body;
  const answer = parseJson(body.toString('utf8'));
  if (!isObject(answer) || !Array.isArray(answer.data)) return body;
  const data = answer.data.map((item: unknown) => (isObject(item) ? { ...item, embedding: reencoded(item.embedding, asked) } : item));
  return jsonText({ ...answer, data }) || body;
}
