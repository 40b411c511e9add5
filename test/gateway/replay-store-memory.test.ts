// The in-process replay store's memory: what its answers hold must stay within its byte budget.
// A small Buffer made with Buffer.from is a slice of Node's shared 8 KiB pool, so an answer kept
// that way held the whole slab it sat in, for a day; in a gateway the slab's other bytes belong to
// whatever else was allocated meanwhile (here: the other buffers made between two answers).
import { describe, expect, it } from 'vitest';
import { MemoryReplayStore, type StoredAnswer } from '../../gateway/src/replay-store';

const FP = 'a'.repeat(64);
const DAY = 24 * 3600_000;
const BUDGET = 1024 * 1024;

/** The answers the store holds (its entries are private: this is what its memory is). */
function heldAnswers(store: MemoryReplayStore): StoredAnswer[] {
  const entries = (store as unknown as { entries: Map<string, { answer?: StoredAnswer }> }).entries;
  return [...entries.values()].flatMap((e) => (e.answer ? [e.answer] : []));
}

/** The bytes of memory behind the answers' bodies: each distinct ArrayBuffer once, whole. */
function heldBytes(answers: StoredAnswer[]): number {
  return [...new Set(answers.map((a) => a.body.buffer))].reduce((sum, b) => sum + b.byteLength, 0);
}

describe('in-process replay store memory', () => {
  it('many small answers hold no more memory than the budget counts', async () => {
    const store = new MemoryReplayStore(BUDGET);
    const other: Buffer[] = [];
    for (let i = 0; i < 5000; i++) {
      const claim = await store.claim(`k${i}`, FP, 10_000);
      if (claim.kind !== 'claimed') throw new Error(`expected a claim, got ${claim.kind}`);
      const body = Buffer.from(`{"id":"chatcmpl-${i}","choices":[{"message":{"content":"${'x'.repeat(150)}"}}]}`);
      await store.keep(claim.lease, { status: 200, headers: { 'content-type': 'application/json' }, body, stream: false }, DAY);
      other.push(Buffer.from('y'.repeat(3000))); // the rest of a request's work, between two answers
      if (other.length > 8) other.shift();
    }
    const answers = heldAnswers(store);
    expect(answers.length).toBeGreaterThan(1000); // the budget keeps some thousands of these
    expect(heldBytes(answers)).toBeLessThanOrEqual(BUDGET);
  });
});
