// The in-process replay store's memory (the heap and buffers it holds, after a full collection)
// must stay within its byte budget. A small Buffer made with Buffer.from is a slice of Node's shared
// 8 KiB pool, so an answer kept that way held the whole slab it sat in, for a day; in a gateway the
// slab's other bytes belong to whatever else was allocated meanwhile (here: the other buffers made
// between two answers).
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { MemoryReplayStore, type StoredAnswer } from '../../gateway/src/replay-store';

const FP = 'a'.repeat(64);
const DAY = 24 * 3600_000;

/** The answers the store holds (its entries are private: this is what its memory is). */
function heldAnswers(store: MemoryReplayStore): StoredAnswer[] {
  const entries = (store as unknown as { entries: Map<string, { answer?: StoredAnswer }> }).entries;
  return [...entries.values()].flatMap((e) => (e.answer ? [e.answer] : []));
}

/** A full collection, so that what is measured is what is still held. */
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
const heldMemory = () => (gc(), gc(), process.memoryUsage()).heapUsed + process.memoryUsage().arrayBuffers;
const BUDGET = 4 * 1024 * 1024;

/** `count` small answers kept under keys made by `keyOf`; `between` runs after each (the rest of a request's work). */
async function fill(store: MemoryReplayStore, count: number, keyOf: (i: number) => string, between = () => {}): Promise<void> {
  const headers = { 'content-type': 'application/json', 'x-gateway-route': 'openai-primary', 'x-gateway-tier': 'hot' };
  for (let i = 0; i < count; i++) {
    const claim = await store.claim(keyOf(i), FP, 10_000);
    if (claim.kind !== 'claimed') throw new Error(`expected a claim, got ${claim.kind}`);
    const body = Buffer.from(`{"id":"chatcmpl-${i}","choices":[{"message":{"content":"${'x'.repeat(150)}"}}]}`);
    await store.keep(claim.lease, { status: 200, headers: { ...headers }, body, stream: false }, DAY);
    between();
  }
}

/** The memory a store filled by `fill` holds: measured once the code that fills it has run (its compiled code is not the store's). */
async function measured(keyOf: (i: number) => string, between?: () => void): Promise<{ held: number; answers: number }> {
  await fill(new MemoryReplayStore(BUDGET), 2000, keyOf, between);
  const before = heldMemory();
  const store = new MemoryReplayStore(BUDGET);
  await fill(store, 20_000, keyOf, between);
  return { held: heldMemory() - before, answers: heldAnswers(store).length };
}

describe('in-process replay store memory', () => {
  it('many small answers hold no more memory than the budget counts', async () => {
    const other: Buffer[] = [];
    const { held, answers } = await measured(
      (i) => `k${i}`,
      () => {
        other.push(Buffer.from('y'.repeat(3000))); // the rest of a request's work, between two answers
        if (other.length > 8) other.shift();
      },
    );
    expect(answers).toBeGreaterThan(2000); // the budget keeps some thousands of these
    expect(held).toBeLessThanOrEqual(BUDGET);
  });

  // Each answer was counted as its body's length and 256 bytes; it took some 650 more (the entry,
  // its key, its headers, a Buffer's own bookkeeping), so small answers held 1.8 times the budget.
  it("the store's whole memory, entries and keys with the answers, stays within its budget", async () => {
    const { held, answers } = await measured((i) => `tenant-acme:/v1/chat/completions:${'k'.repeat(40)}${i}`);
    expect(answers).toBeGreaterThan(2000);
    expect(held).toBeLessThanOrEqual(BUDGET);
  });
});
