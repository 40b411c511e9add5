/**
 * The Idempotency-Keys of a call's event batches, as the call keeps them: so that a batch sent again
 * with its key (a retry after a timeout) is applied once, and the key sent again with another batch
 * is refused rather than taken for a retry (its audio, turns and cost lost without a word).
 */
import { createHash } from 'node:crypto';
import { canonicalJson } from '../canonical-json';
import type { StoredCall } from './call-store';

/** The Idempotency-Keys of a call's latest event batches kept (as short hashes) to tell a batch sent again. */
const EVENT_KEYS_KEPT = 1000;

/** The part of a kept key that is the Idempotency-Key's: 64 bits of its SHA-256, so any key costs a call the same. */
const KEY_CHARS = 11;

/**
 * A batch's Idempotency-Key as kept with the call: the key's hash, then 36 bits of the batch's own
 * (its JSON with keys sorted, as the gateway's replay fingerprints), so the key sent again with
 * another batch is told from a retry (a call kept before them has the key's alone).
 */
export const eventKey = (key: string, events: unknown[]) =>
  createHash('sha256').update(key).digest('base64url').slice(0, KEY_CHARS) +
  createHash('sha256').update(canonicalJson(events)).digest('base64url').slice(0, 6);

/** The kept key of the batch sent with this Idempotency-Key, if the call has seen the key. */
export const keptKey = (call: StoredCall, key: string) => call.eventKeys?.find((k) => k.slice(0, KEY_CHARS) === key.slice(0, KEY_CHARS));

/** The call's kept keys with this one added, the oldest let go past EVENT_KEYS_KEPT. */
export const withKey = (call: StoredCall, key: string) => [...(call.eventKeys ?? []), key].slice(-EVENT_KEYS_KEPT);

/**
 * Whether the key the call has `seen` (keptKey) came with another batch than `kept`: one kept before
 * batches were told apart (the key's hash alone) is taken for this batch.
 */
export const anotherBatch = (seen: string | undefined, kept: string | undefined) =>
  seen !== undefined && seen.length > KEY_CHARS && seen !== kept;
