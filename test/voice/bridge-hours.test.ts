// A booking for a time the business is closed, end to end on loopback (as bridge.test.ts): the
// model is told the opening hours, and a booking or move it asks for outside them is answered with
// a refusal it can act on, without reaching the back office.
import { afterEach, describe, expect, it } from 'vitest';
import { bridgeStack, type BridgeStack } from './peers/bridge-stack';
import { until } from './peers/wait';
import { BOOKING, assistantAudio, brain, clientEvent, speak } from './peers/script';
import type { RtConn } from './peers/realtime-peer';

let s: BridgeStack | null = null;
afterEach(async () => {
  await s?.close();
  s = null;
});

const DAYS = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];
/** A date `ahead` days from today in Lisbon, and its weekday. */
function lisbonDay(ahead: number): { date: string; day: number } {
  const today = new Intl.DateTimeFormat('en-CA', { timeZone: 'Europe/Lisbon' }).format(new Date());
  const at = new Date(`${today}T12:00:00Z`);
  at.setUTCDate(at.getUTCDate() + ahead);
  return { date: at.toISOString().slice(0, 10), day: at.getUTCDay() };
}

describe('phone bridge: business hours', () => {
  it('a booking on a day the business is closed is refused to the model, naming the hours; the back office is not called', async () => {
    const closed = lisbonDay(3); // never today, so the call itself is answered
    const hours = `${DAYS.filter((_, d) => d !== closed.day).join(',')} 00:00-24:00`;
    s = await bridgeStack((c) => (c.meta.business_hours_local = hours));
    const args = { ...BOOKING, date: closed.date, time: '10:00' };
    s.realtime.heardQueue = [{ text: 'book me a cleaning then', logprob: -0.1 }];
    s.realtime.brain = brain({
      turns: [{ call: { name: 'book_slot', args } }],
      afterOutput: { audio: assistantAudio(300), transcript: 'Another day?' },
    });
    const call = await s.twilio.call('CAH001');
    const conn: RtConn = s.realtime.conns[0] ?? (await until<RtConn>(s.realtime, 'connection'));
    const update = (await clientEvent(conn, 'session.update')).session;
    expect(update.instructions).toContain(`The business is open ${hours} (Europe/Lisbon)`);
    await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
    const outputs: any[] = [];
    conn.on('client', (e) => e.type === 'conversation.item.create' && e.item.type === 'function_call_output' && outputs.push(e.item));
    speak(call, 400);
    await until(conn, 'client', () => outputs.length === 1, 'the function output');
    expect(JSON.parse(outputs[0].output)).toEqual({
      ok: false,
      error: `args.time: ${closed.date} 10:00 is outside business hours (${hours}, Europe/Lisbon): offer the caller a time within them`,
    });
    expect(s.hooks.seen.filter((h) => h.path === '/book_slot')).toEqual([]);
    call.hangUp();
    await s.endOf('CAH001');
  });
});
