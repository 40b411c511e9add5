/**
 * The call's realtime session: one socket at a time, configured with `session.update`, with the
 * rule that keeps a caller out of silence when the model's side fails (refused, closed, a
 * `server_error`, no `session.updated`): ONE more attempt per call, each within the latency
 * budget; if that fails too, `onLost` (the call session transfers the caller to a person).
 *
 * A new socket is a new conversation, so what was said so far (the transcripts) is replayed into
 * it as text items, and if the caller was waiting for an answer the model is asked for one (the
 * function results it has not answered are given by the call session: function-outputs.ts).
 * Caller audio that arrives while reconnecting is held (up to the budget) and sent once the new
 * session is ready; after that it is dropped rather than delayed.
 */
import type { SessionUpdateEvent } from 'openai/resources/realtime/realtime';
import { describeError, RealtimeLink, type ClientEvent, type RealtimeServerMessage, type Watch } from './realtime-link';
import { base64Bytes, bytesToMs } from './playback';

export interface SaidLine {
  speaker: 'user' | 'assistant';
  text: string;
  confidence?: number | null;
  /** An assistant line the caller cut off: its text is what was heard of it, ending in "…". */
  cut?: boolean;
}

const HISTORY_ITEMS = 40;

export class RealtimeSession {
  private link: RealtimeLink | null = null;
  private ready = false;
  private retried = false;
  private closed = false;
  private held: string[] = [];
  private heldMs = 0;
  /** Caller audio sent into the current session, in ms (the session's own audio clock). */
  appendedMs = 0;
  /** The last failure, for the record and the logs. */
  lastFailure = '';
  onEvent: (e: RealtimeServerMessage) => void = () => undefined;
  onReady: (first: boolean) => void = () => undefined;
  onLost: (why: string) => void = () => undefined;
  /** Caller audio given to the model, in bytes (held audio once it is sent, never if it is dropped). */
  onAudioSent: (bytes: number) => void = () => undefined;

  constructor(
    private readonly opts: {
      url: string;
      apiKey: string;
      /** The session's configuration as it stands (a new socket gets the current one). */
      update: () => SessionUpdateEvent;
      budgetMs: number;
      /** How the socket is watched for a server that stops answering: a ping, or a response in progress (realtime-link.ts). */
      watch?: Watch;
      history: () => SaidLine[];
      /** Whether the caller is waiting for an answer (then a new session is asked for one). */
      awaitingAnswer: () => boolean;
      /** Asks the new session for that answer (the call session asks for one answer at a time). */
      answer: () => void;
      log: { warn: (m: string) => void };
      callId: string;
    },
  ) {}

  get isReady(): boolean {
    return this.ready;
  }

  start(): void {
    void this.open(true);
  }

  /** Sends caller audio (base64 µ-law, unchanged), holds it while reconnecting, or drops it. */
  append(payload: string, bytes: number): void {
    if (this.ready) {
      this.link!.sendRaw(`{"type":"input_audio_buffer.append","audio":"${payload}"}`);
      this.appendedMs += bytesToMs(bytes);
      return this.onAudioSent(bytes);
    }
    if (this.closed || this.heldMs >= this.opts.budgetMs) return;
    this.held.push(payload);
    this.heldMs += bytesToMs(bytes);
  }

  send(event: ClientEvent): void {
    if (this.ready) this.link!.send(event);
  }

  /** The call is over: should the socket fail now, no other is opened (the session ends, `onLost`). */
  noRetry(): void {
    this.retried = true;
  }

  close(): void {
    this.closed = true;
    this.ready = false;
    this.link?.close();
    this.link = null;
  }

  private async open(first: boolean): Promise<void> {
    let link: RealtimeLink;
    const deadline = performance.now() + this.opts.budgetMs;
    try {
      link = await RealtimeLink.connect(this.opts.url, this.opts.apiKey, this.opts.budgetMs, this.opts.watch);
    } catch (error) {
      return this.failed((error as Error).message, first);
    }
    if (this.closed) return link.close();
    this.link = link;
    this.appendedMs = 0;
    const timer = setTimeout(() => {
      if (this.link !== link) return;
      link.close();
      this.failed('no session.updated within the latency budget', first);
    }, deadline - performance.now());
    link.onFailure = (why) => {
      clearTimeout(timer);
      if (this.link === link) this.failed(why, first && !this.ready);
    };
    link.onEvent = (e) => {
      if (this.link !== link) return; // a socket we already gave up (messages still in flight)
      if (!this.ready) {
        if (e.type === 'error') {
          clearTimeout(timer);
          link.close();
          return this.failed(`the session was refused (${describeError(e)})`, first);
        }
        if (e.type !== 'session.updated') return;
        clearTimeout(timer);
        this.ready = true;
        if (!first) this.replay();
        this.flushHeld();
        return this.onReady(first);
      }
      if (e.type === 'error' && (e.error as { type?: string } | undefined)?.type === 'server_error') {
        link.close();
        return this.failed(`server_error (${describeError(e)})`, false);
      }
      this.onEvent(e);
    };
    link.send(this.opts.update());
  }

  private failed(why: string, first: boolean): void {
    this.ready = false;
    this.link = null;
    this.lastFailure = why;
    if (this.closed) return;
    if (!this.retried) {
      this.retried = true;
      this.opts.log.warn(`call ${this.opts.callId}: realtime ${first ? 'connection' : 'session'} failed (${why}); one more attempt`);
      void this.open(first);
      return;
    }
    this.closed = true;
    this.held = [];
    this.onLost(why);
  }

  /** A new conversation: the transcript so far as text items, then an answer if one is owed. */
  private replay(): void {
    for (const line of this.opts.history().slice(-HISTORY_ITEMS)) {
      const content = line.speaker === 'user' ? { type: 'input_text', text: line.text } : { type: 'output_text', text: line.text };
      this.link!.send({ type: 'conversation.item.create', item: { type: 'message', role: line.speaker, content: [content] } });
    }
    if (this.opts.awaitingAnswer()) this.opts.answer();
  }

  private flushHeld(): void {
    const held = this.held;
    this.held = [];
    this.heldMs = 0;
    for (const payload of held) this.append(payload, base64Bytes(payload));
  }
}
