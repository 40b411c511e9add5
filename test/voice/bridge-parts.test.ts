// The bridge's small parts where a mistake would be silent: the settings it reads (what is
// missing is named, never shown), Twilio call control (what is retried, what is not, what an
// error says), the confidence it derives from log-probabilities, how it tells its own
// responses from the model's turns, and what it reckons the caller heard of the assistant.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { RealtimeResponse } from 'openai/resources/realtime/realtime';
import { transcriptConfidence } from '../../gateway/src/voice/phone/confidence';
import { responseEvent } from '../../gateway/src/voice/phone/meter-event';
import { OwnResponses } from '../../gateway/src/voice/phone/own-responses';
import { Playback } from '../../gateway/src/voice/phone/playback';
import { RealtimeLink } from '../../gateway/src/voice/phone/realtime-link';
import { outputAllowance } from '../../gateway/src/voice/phone/session-config';
import { phoneSettings } from '../../gateway/src/voice/phone/settings';
import { TwilioCalls } from '../../gateway/src/voice/phone/twilio-calls';
import { filled } from './filled';

describe('phone settings', () => {
  const env = {
    PUBLIC_URL: 'https://voice.example.com/',
    OPENAI_API_KEY: 'sk-secret-value',
    TWILIO_ACCOUNT_SID: 'AC123',
    TWILIO_AUTH_TOKEN: 'tw-secret-value',
  };

  it('derives the media URL and the realtime URL with the model; defaults for the APIs', () => {
    const { settings } = phoneSettings(env, 'gpt-realtime-mini');
    expect(settings).toMatchObject({
      publicUrl: 'https://voice.example.com',
      mediaUrl: 'wss://voice.example.com/twilio/media',
      realtimeUrl: 'wss://api.openai.com/v1/realtime?model=gpt-realtime-mini',
      twilioApiUrl: 'https://api.twilio.com',
    });
  });

  it('names what is missing or malformed, never a value', () => {
    const { settings, problems } = phoneSettings(
      { ...env, PUBLIC_URL: 'https://voice.example.com/gateway', OPENAI_API_KEY: '', OPENAI_REALTIME_URL: 'https://x' },
      'm',
    );
    expect(settings).toBeNull();
    expect(problems).toEqual([
      'OPENAI_API_KEY is not set',
      'PUBLIC_URL: expected the origin Twilio reaches, such as https://voice.example.com (no path)',
      'OPENAI_REALTIME_URL: expected a wss:// URL',
    ]);
    expect(problems.join(' ')).not.toContain('secret');
  });
});

describe('the realtime connection', () => {
  it('a handshake refused with 401 or 403 names OPENAI_API_KEY as the thing to fix, and never the key', async () => {
    let status = 401;
    const server = createServer((_req, res) => res.writeHead(426).end());
    server.on('upgrade', (_req, socket) =>
      socket.end(`HTTP/1.1 ${status} No\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}`),
    );
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `ws://127.0.0.1:${(server.address() as AddressInfo).port}/v1/realtime?model=m`;
    try {
      await expect(RealtimeLink.connect(url, 'sk-secret-value', 2000)).rejects.toThrow(
        'the realtime server refused the connection (HTTP 401): OPENAI_API_KEY was not accepted (a wrong or revoked key)',
      );
      status = 403;
      await expect(RealtimeLink.connect(url, 'sk-secret-value', 2000)).rejects.toThrow(
        /\(HTTP 403\): OPENAI_API_KEY has no access to the realtime model/,
      );
      status = 503;
      await expect(RealtimeLink.connect(url, 'sk-secret-value', 2000)).rejects.toThrow(
        /^the realtime server refused the connection \(HTTP 503\)$/,
      );
    } finally {
      server.close();
    }
  });
});

describe('Twilio call control', () => {
  let server: Server | null = null;
  afterEach(() => new Promise<void>((r) => (server ? server.close(() => r()) : r())));

  async function api(answers: number[]) {
    const seen: Array<{ url: string; auth: string; body: string }> = [];
    server = createServer(async (req, res) => {
      let body = '';
      for await (const c of req) body += c;
      seen.push({ url: req.url!, auth: req.headers.authorization!, body });
      const status = answers[seen.length - 1] ?? 200;
      res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify({ message: `status ${status}` }));
    });
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
    const calls = new TwilioCalls({
      apiUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      accountSid: 'AC123',
      authToken: 'tw-secret-value',
      backoffMs: 5,
    });
    return { calls, seen };
  }

  it('redirects with TwiML (form body, basic auth); a 5xx is retried, then it goes through', async () => {
    const { calls, seen } = await api([503, 500, 200]);
    await calls.redirect('CA42', '<Response><Dial>+351211234567</Dial></Response>');
    expect(seen).toHaveLength(3);
    expect(seen[0].url).toBe('/2010-04-01/Accounts/AC123/Calls/CA42.json');
    expect(seen[0].auth).toBe(`Basic ${Buffer.from('AC123:tw-secret-value').toString('base64')}`);
    expect(Object.fromEntries(new URLSearchParams(seen[2].body))).toEqual({ Twiml: '<Response><Dial>+351211234567</Dial></Response>' });
  });

  it('a 4xx is not retried; the error says the status and Twilio’s message, not the credentials', async () => {
    const { calls, seen } = await api([404]);
    const error = await calls.complete('CA42').catch((e: Error) => e);
    expect(seen).toHaveLength(1);
    expect(seen[0].body).toBe('Status=completed');
    expect((error as Error).message).toBe('Twilio call update: HTTP 404: status 404');
    expect((error as Error).message).not.toContain('secret');
    await expect(calls.complete('CA42/../../x')).rejects.toThrow('not a Twilio CallSid');
  });
});

describe('transcript confidence', () => {
  it('is exp(mean log-probability), and null without log-probabilities', () => {
    expect(transcriptConfidence([{ logprob: Math.log(0.9) }, { logprob: Math.log(0.4) }])).toBeCloseTo(0.6, 4);
    expect(transcriptConfidence([{ logprob: 0 }])).toBe(1);
    expect(transcriptConfidence([])).toBeNull();
    expect(transcriptConfidence(undefined)).toBeNull();
    expect(transcriptConfidence([{ logprob: 'x' }])).toBeNull();
  });
});

describe("the bridge's own responses", () => {
  it('a model turn created before ours is muted and cancelled, ours asked again once it is done; ours is recognised by its metadata', () => {
    const sent: any[] = [];
    const own = new OwnResponses((e) => sent.push(e));
    own.ask('closing', { instructions: 'Say this' });
    expect(own.created('resp_model', null)).toBeNull();
    expect(own.isMuted('resp_model')).toBe(true);
    expect(sent.map((e) => e.type)).toEqual(['response.create', 'response.cancel']);
    own.done();
    expect(sent[2]).toEqual(sent[0]);
    expect(own.created('resp_ours', { bridge: 'closing' })).toBe('closing');
    expect(own.isMuted('resp_ours')).toBe(false);
    own.done();
    expect(sent).toHaveLength(3); // nothing asked again
  });

  it('a server that never echoes metadata cannot keep the call asking: after two retries the next response is taken as ours', () => {
    const sent: any[] = [];
    const own = new OwnResponses((e) => sent.push(e));
    own.ask('consent', {});
    for (const id of ['r1', 'r2']) {
      expect(own.created(id, undefined)).toBeNull();
      own.done();
    }
    expect(own.created('r3', undefined)).toBe('consent');
    expect(own.isMuted('r3')).toBe(false);
    expect(sent.filter((e) => e.type === 'response.create')).toHaveLength(3);
  });
});

describe('what the caller heard (playback)', () => {
  it('an item queued behind one still playing starts when that one is heard to its end; each keeps its own position', () => {
    let t = 0;
    const p = new Playback(() => t);
    expect(p.sent('A', 8 * 300)).toBe('m1'); // 300 ms at once, marked
    t = 10;
    expect(p.sent('B', 8 * 100)).toBe('m2'); // queued behind the 290 ms left of A
    t = 150;
    expect(p.heard()).toEqual([
      { item: 'A', ms: 150 },
      { item: 'B', ms: 0 },
    ]);
    t = 320; // A's last mark comes back a little late: B starts now, not at the estimate
    p.echoed('m1');
    t = 370;
    expect(p.heard()).toEqual([{ item: 'B', ms: 50 }]);
    p.echoed('m2');
    expect(p.playing()).toBe(false);
    expect(p.heard()).toEqual([]);
  });

  it('three items sent at once play one after another', () => {
    let t = 0;
    const p = new Playback(() => t);
    p.sent('A', 8 * 200);
    p.sent('B', 8 * 100);
    p.sent('C', 8 * 100);
    t = 250;
    expect(p.heard()).toEqual([
      { item: 'A', ms: 200 },
      { item: 'B', ms: 50 },
      { item: 'C', ms: 0 },
    ]);
    t = 350;
    expect(p.heard().map((h) => h.ms)).toEqual([200, 100, 50]);
  });

  it('an answer whose audio stops coming for a while (the model slow mid-answer) is heard from where it resumes: the silence is not counted as heard', () => {
    let t = 0;
    const p = new Playback(() => t);
    const first = p.sent('A', 8 * 300)!; // 300 ms at once, marked
    t = 310;
    p.echoed(first); // all of it heard; the model sends nothing more for 2 s
    t = 2300;
    const marks = Array.from({ length: 30 }, () => p.sent('A', 8 * 100)!); // the rest comes at once, and plays from now
    t = 2500;
    expect(p.heard()).toEqual([{ item: 'A', ms: 500 }]);
    expect(p.endsAt()).toBe(5300);
    t = 2520;
    p.echoed(marks[1]); // 500 ms of it heard, as the marks say
    t = 2600;
    expect(p.heard()).toEqual([{ item: 'A', ms: 580 }]);
  });

  it('an answer queued behind one whose marks come back late is heard from when that one ends, though its audio resumes after a pause meanwhile', () => {
    let t = 0;
    const p = new Playback(() => t);
    const line = p.sent('L', 8 * 100)!; // the opening line, its marks echoed (the stream echoes them)
    t = 100;
    p.echoed(line);
    const a = p.sent('A', 8 * 300)!; // 300 ms, marked
    p.sent('B', 8 * 100); // queued behind it, by the estimate from 400 ms
    t = 600; // by the estimate all of B sent so far has played, but Twilio is still playing A
    p.sent('B', 8 * 100);
    t = 700;
    p.echoed(a); // A has played only now: B starts now
    t = 750;
    expect(p.heard()).toEqual([{ item: 'B', ms: 50 }]);
  });

  it('on a stream that never echoes a mark, audio resumed after a pause plays from when it comes in answers after the first too', () => {
    let t = 0;
    const p = new Playback(() => t);
    p.sent('L', 8 * 1000); // the opening line: its marks never come back (taken as heard by the call session)
    p.mark();
    t = 3000;
    p.sent('A', 8 * 500); // the next answer, 500 ms, then a pause in it
    t = 5000;
    p.sent('A', 8 * 500); // resumed: plays from now
    t = 5100;
    expect(p.heard().find((h) => h.item === 'A')).toEqual({ item: 'A', ms: 600 });
  });

  it('after a clear nothing is playing, and echoes of the cleared marks change nothing', () => {
    let t = 0;
    const p = new Playback(() => t);
    const m = p.sent('A', 8 * 200)!;
    p.clear();
    p.echoed(m);
    expect(p.playing()).toBe(false);
    t = 50;
    p.sent('B', 8 * 100);
    t = 80;
    expect(p.heard()).toEqual([{ item: 'B', ms: 30 }]);
  });
});

describe("a realtime response's meter event", () => {
  const facts = (status: string) => ({
    config: filled(),
    provider: 'openai',
    tenant: 't1',
    callId: 'CA1',
    response: { status } as RealtimeResponse,
    usage: { input_token_details: { audio_tokens: 0 }, output_token_details: { audio_tokens: 0 } },
    latencyMs: 5,
    confidence: null,
  });

  it('names how the response ended, and nothing for a status it does not know (never what every object has)', () => {
    expect(responseEvent(facts('failed')).error_code).toBe('FAILED');
    expect(responseEvent(facts('completed')).error_code).toBe('');
    for (const hostile of ['constructor', 'toString', '__proto__']) expect(responseEvent(facts(hostile)).error_code).toBe('');
  });

  it('without usage, or without an audio count in it, its cost is unknown: empty, and UNPRICED after its own code', () => {
    expect(responseEvent({ ...facts('failed'), usage: undefined })).toMatchObject({ cost_usd: null, error_code: 'FAILED|UNPRICED' });
    expect(responseEvent({ ...facts('completed'), usage: { input_tokens: 3 } })).toMatchObject({ cost_usd: null, error_code: 'UNPRICED' });
    expect(responseEvent(facts('completed')).cost_usd).toBe(0);
  });
  it('prices its text tokens as the guard does; without text prices it carries the audio part, marked UNPRICED', () => {
    const usage = {
      input_tokens: 3000,
      output_tokens: 300,
      input_token_details: { audio_tokens: 1000, text_tokens: 2000, cached_tokens_details: { audio_tokens: 0, text_tokens: 500 } },
      output_token_details: { audio_tokens: 200, text_tokens: 100 },
    };
    const audio = 1000 * 10 + 200 * 20; // USD per million: audio in 10, out 20; text in 0.6 (cached too), out 2.4
    const priced = responseEvent({ ...facts('completed'), usage });
    expect(priced).toMatchObject({ cost_usd: (audio + 2000 * 0.6 + 100 * 2.4) / 1e6, error_code: '' });
    const config = filled();
    delete config.spend_guard.text_in_per_million;
    delete config.spend_guard.text_out_per_million;
    expect(responseEvent({ ...facts('cancelled'), config, usage })).toMatchObject({
      cost_usd: audio / 1e6,
      error_code: 'CANCELLED|UNPRICED',
    });
    // A response without text tokens is priced whole without text prices.
    expect(responseEvent({ ...facts('completed'), config })).toMatchObject({ cost_usd: 0, error_code: '' });
  });
});

describe("the session's output allowance (max_output_tokens)", () => {
  it('is what is left of the cap at the dearer output price, audio or text: no answer passes the cap by more than one token', () => {
    const c = filled(); // audio out 20, text out 2.4 USD per million
    c.spend_guard.per_call_usd_cap = 0.0014;
    expect(outputAllowance(c, 0.0004)).toBe(50); // 0.001 USD left: 50 tokens of audio
    c.spend_guard.text_out_per_million = 40; // a text price dearer than the audio's: 25 tokens of text reach the cap
    expect(outputAllowance(c, 0.0004)).toBe(25);
    delete c.spend_guard.text_out_per_million;
    delete c.spend_guard.text_in_per_million;
    expect(outputAllowance(c, 0.0004)).toBe(50);
    c.spend_guard.disconnect_when_exceeded = false;
    expect(outputAllowance(c, 0.0014)).toBe('inf');
  });
});
