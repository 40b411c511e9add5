/** A parsed JSON value that is an object (not null, not an array): what provider and caller JSON is read through. */
export const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
/** An object's fields, none for anything else (a usage's optional details). */
export const fieldsOf = (v: unknown): Record<string, unknown> => (isObject(v) ? v : {});

/** Text without a leading UTF-8 byte-order mark, which JSON decoders (a client's, Express's) read past. */
export const withoutBom = (text: string): string => (text.charCodeAt(0) === 0xfeff ? text.slice(1) : text);

/**
 * Text parsed as JSON, or null when it is not JSON. A leading byte-order mark is dropped, as a
 * client's decoder drops it: a provider's answer after one is read as the client reads it.
 */
export function parseJson(text: string): unknown {
  try {
    return JSON.parse(withoutBom(text));
  } catch {
    return null;
  }
}

/** A parsed value as JSON text, or '' when it cannot be written again (nested too deep, or too long for a string). */
export function jsonText(value: unknown): string {
  try {
    return JSON.stringify(value);
  } catch {
    return '';
  }
}
