/**
 * Feeds the spend guard (through VoiceService, so the call's state is the same one the
 * /v1/voice/calls endpoints keep in Redis) with the call's real events, and hands its verdict
 * back. Audio frames are summed, not posted one by one: 50 frames a second each way would be a
 * Redis round trip every 10 ms per call, and the guard only adds their durations. The sums go out
 * before every other event (so `assistant.response.done` prices all the audio before it) and
 * whenever a second of audio has gathered. Batches go one at a time, in order, each numbered (a
 * batch sent again after a lost answer is applied once); a batch the guard refuses (400) is sent
 * again event by event, so only the event it refuses is lost (and logged).
 */
import { randomUUID } from 'node:crypto';
import type { EndedReason } from '../../../../schema/call-record';
import type { GuardBatch } from '../call-store';
import type { VoiceEvent } from '../spend-guard';
import { bytesToMs } from './playback';

export interface Verdict {
  action: 'continue' | 'escalate' | 'disconnect';
  /** The guard's reasons are all call-ending reasons of the record. */
  reason?: EndedReason;
  estUsd_at_disconnect?: number;
  /** The call's state after the batch: `estUsd`, what it cost so far, and its `turns` (the responses counted). */
  state?: { estUsd?: number; turns?: number };
}

interface GuardTarget {
  events(id: string, events: unknown[], batch?: GuardBatch): Promise<{ status: number; body: unknown }>;
}

const FLUSH_AT_MS = 1000;

export class GuardFeed {
  private userBytes = 0;
  private assistantBytes = 0;
  private queue: VoiceEvent[] = [];
  private running: Promise<void> | null = null;
  /** Each batch numbered in this feed: one sent again after a lost answer is applied once. */
  private readonly feed = randomUUID();
  private batches = 0;

  constructor(
    private readonly voice: GuardTarget,
    private readonly callId: string,
    private readonly onVerdict: (v: Verdict) => void,
    private readonly log: { error: (m: string) => void },
  ) {}

  /** Audio forwarded to the model (user) or played to the caller (assistant). */
  frame(kind: 'user' | 'assistant', bytes: number): void {
    if (bytes <= 0) return; // the guard refuses empty frames
    if (kind === 'user') this.userBytes += bytes;
    else this.assistantBytes += bytes;
    if (bytesToMs(this.userBytes + this.assistantBytes) >= FLUSH_AT_MS) this.push(null);
  }

  event(e: VoiceEvent): void {
    this.push(e);
  }

  /** Resolves once everything so far reached the guard. */
  async flush(): Promise<void> {
    this.push(null);
    while (this.running) await this.running;
  }

  private push(e: VoiceEvent | null): void {
    if (this.userBytes) this.queue.push({ type: 'user.audio_frame', ms: bytesToMs(this.userBytes) });
    if (this.assistantBytes) this.queue.push({ type: 'assistant.audio_frame', ms: bytesToMs(this.assistantBytes) });
    this.userBytes = this.assistantBytes = 0;
    if (e) this.queue.push(e);
    if (!this.running && this.queue.length) this.running = this.drain();
  }

  private async drain(): Promise<void> {
    while (this.queue.length) {
      const batch = this.queue;
      this.queue = [];
      const status = await this.send(batch);
      // The guard takes a batch whole or not at all: one event it refuses (a usage figure, say)
      // must not take the audio durations and turns sent with it down too, so each goes alone.
      if (status === 400 && batch.length > 1) for (const e of batch) await this.send([e]);
    }
    this.running = null;
  }

  /** One batch to the guard, its verdict handed on; the HTTP-like status (0: unreachable). */
  private async send(batch: VoiceEvent[]): Promise<number> {
    const numbered = { feed: this.feed, n: ++this.batches };
    for (let attempt = 1; ; attempt++) {
      try {
        const out = await this.voice.events(this.callId, batch, numbered);
        if (out.status === 200) this.onVerdict(out.body as Verdict);
        else if (out.status !== 400 || batch.length === 1)
          this.log.error(`call ${this.callId}: the spend guard refused events (${out.status}: ${JSON.stringify(out.body)})`);
        return out.status;
      } catch (error) {
        // The store hiccuped: the same batch again, under its number (if the store applied it before
        // the answer was lost, it is not applied twice), then give up loudly.
        if (attempt === 3) {
          this.log.error(
            `call ${this.callId}: the spend guard could not be reached (${(error as Error).message}); ${batch.length} event(s) lost`,
          );
          return 0;
        }
        await new Promise((r) => setTimeout(r, 100 * attempt));
      }
    }
  }
}
