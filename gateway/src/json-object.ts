/** A parsed JSON value that is an object (not null, not an array): what provider and caller JSON is read through. */
export const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
