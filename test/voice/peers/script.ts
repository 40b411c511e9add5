// What the local realtime "model" says, per situation, and what the local caller says.
import type { BrainContext, Reply, RtConn } from './realtime-peer';
import { silence, voiced } from './mulaw';
import type { MediaCall } from './twilio-peer';
import { until } from './wait';

/** The assistant's voice: higher pitch than the caller's, so the two are told apart on the wire. */
export const assistantAudio = (ms: number) => voiced(ms, 210, 7000);

export interface Script {
  greeting?: Reply;
  /** The consent line said again (default: the greeting). */
  repeat?: Reply;
  /** One reply per caller turn, in order (then a short answer). */
  turns?: Reply[];
  /** After function outputs (the client's plain response.create). */
  afterOutput?: Reply;
  closing?: Reply;
}

export function brain(script: Script): (ctx: BrainContext) => Reply | null {
  let turn = 0;
  return (ctx) => {
    if (ctx.trigger === 'create') {
      if (ctx.instructions?.startsWith('Greet'))
        return script.greeting ?? { audio: assistantAudio(300), transcript: 'Hello, this is an AI assistant.' };
      if (ctx.instructions?.startsWith('Repeat'))
        return script.repeat ?? script.greeting ?? { audio: assistantAudio(300), transcript: 'This is an AI assistant.' };
      if (ctx.instructions?.startsWith('Say this')) return script.closing ?? { audio: assistantAudio(500), transcript: 'Goodbye.' };
      return script.afterOutput ?? { audio: assistantAudio(300), transcript: 'Done.' };
    }
    return script.turns?.[turn++] ?? { audio: assistantAudio(300), transcript: 'I see.' };
  };
}

/** The caller says something (a voiced utterance) and then pauses long enough to end the turn. */
export function speak(call: MediaCall, ms = 400): Buffer {
  const words = voiced(ms, 120);
  call.say(words);
  call.say(silence(700));
  return words;
}

/** The next server event of a type on this connection (optionally matching). */
export function serverEvent(conn: RtConn, type: string, pred: (e: any) => boolean = () => true): Promise<any> {
  return until<any>(conn, 'server', (e) => e.type === type && pred(e), `realtime ${type}`);
}

export function clientEvent(conn: RtConn, type: string, pred: (e: any) => boolean = () => true): Promise<any> {
  const seen = conn.events.find((e) => e.type === type && pred(e));
  return seen ? Promise.resolve(seen) : until<any>(conn, 'client', (e) => e.type === type && pred(e), `client ${type}`);
}

/** A booking's arguments as the model gives them (book_slot). */
export const BOOKING = {
  name: 'Ana',
  phone: '+351910000001',
  service: 'cleaning',
  date: '2026-11-24',
  time: '10:00',
  location: 'Lisboa',
  notes: '',
};
