// Twilio's side of the door: signed webhooks and handshakes (anything else → 403, nothing
// started), the TwiML for each path, a stream only for a call the webhook answered, the status
// callback, and the bridge wired into the gateway's own server (createStack).
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { getExpectedTwilioSignature } from 'twilio/lib/webhooks/webhooks.js';
import WebSocket from 'ws';
import { afterEach, describe, expect, it } from 'vitest';
import { captureLogger, listenStack } from '../gateway/harness';
import { filled } from './filled';
import { ACCOUNT_SID, AUTH_TOKEN, bridgeStack, PUBLIC_URL, type BridgeStack } from './peers/bridge-stack';
import { API_KEY, RealtimePeer } from './peers/realtime-peer';
import { assistantAudio, brain } from './peers/script';
import { TwilioPeer } from './peers/twilio-peer';
import { until } from './peers/wait';
import { until as poll } from '../gateway/instances';
import { TEST_REDIS_URL } from '../redis-db';
import { TwilioAuth } from '../../gateway/src/voice/phone/twilio-auth';

let s: BridgeStack | null = null;
afterEach(async () => {
  await s?.close();
  s = null;
});

const form = (callSid: string, from = '+351910000001') => ({
  CallSid: callSid,
  AccountSid: ACCOUNT_SID,
  From: from,
  To: '+351210000000',
  CallStatus: 'ringing',
});

describe('phone bridge: Twilio webhooks and the media stream door', () => {
  it('an invalid or missing signature → 403 and nothing started; a signed call → <Connect><Stream> then the transfer fallback', async () => {
    s = await bridgeStack();
    const forged = await s.twilio.placeCall(form('CA0201'), 'bm90IGEgc2lnbmF0dXJl');
    expect([forged.status, forged.twiml]).toEqual([403, 'invalid Twilio signature']);
    const other = getExpectedTwilioSignature('another-token', `${PUBLIC_URL}/twilio/voice`, form('CA0201'));
    expect((await s.twilio.placeCall(form('CA0201'), other)).status).toBe(403);
    expect((await s.voice.events('CA0201', [])).status).toBe(404); // no call was started
    expect(s.realtime.attempts).toBe(0);

    const answer = await s.twilio.placeCall(form('CA0201'));
    expect(answer.status).toBe(200);
    expect(answer.stream!.url).toBe('wss://voice.example.test/twilio/media');
    expect(Object.keys(answer.stream!.parameters).sort()).toEqual(['from', 'ticket', 'to']);
    expect(answer.twiml).toMatch(
      /<\/Connect><Say>[^<]+<\/Say><Dial action="[^"]+" method="POST" timeout="25">\+351211234567<\/Dial><\/Response>$/,
    );
    expect((await s.voice.events('CA0201', [])).status).toBe(200);
  });

  it('caller text cannot become TwiML: a hostile From is escaped out of the answer', async () => {
    s = await bridgeStack();
    const answer = await s.twilio.placeCall(form('CA0202', '+351"/><Dial>+19005550100</Dial><Say>x'));
    expect(answer.status).toBe(200);
    expect(answer.twiml).not.toContain('+1900');
    expect(answer.twiml.match(/<Dial\b/g)).toHaveLength(1);
    expect(answer.twiml).toContain('/twilio/dial"'); // no number in the Dial action's query either
  });

  it('the media stream: a bad handshake signature → 403; a stream for a call the webhook did not answer → closed, no realtime session', async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({});
    const answer = await s.twilio.placeCall(form('CA0203'));
    await expect(s.twilio.openStream('CA0203', answer, { signature: 'bad' })).rejects.toThrow('HTTP 403');
    // A valid handshake, but the ticket of another call, or none at all.
    const stolen = await s.twilio.openStream('CA0299', answer);
    const closed = await until<{ code: number; reason: string }>(stolen, 'closed');
    expect(closed).toEqual({ code: 1008, reason: 'not a call this gateway answered' });
    const none = await s.twilio.openStream('CA0203', answer, { ticket: '' });
    expect((await until<{ code: number }>(none, 'closed')).code).toBe(1008);
    expect(s.realtime.attempts).toBe(0);
    // The answered call itself streams.
    const call = await s.twilio.openStream('CA0203', answer);
    await until(s.realtime, 'connection');
    expect(s.bridge.liveCalls).toBe(1);
    call.hangUp();
    await s.endOf('CA0203');
  });

  it('a ticket opens one stream, soon after its call was answered: a replayed or old ticket opens nothing', async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({});
    const answer = await s.twilio.placeCall(form('CA0204'));
    const call = await s.twilio.openStream('CA0204', answer);
    await until(s.realtime, 'connection');
    call.hangUp();
    await s.endOf('CA0204');
    // The same signed handshake and ticket again, after the call ended: no second session.
    const replayed = await s.twilio.openStream('CA0204', answer);
    expect(await until<{ code: number; reason: string }>(replayed, 'closed')).toEqual({
      code: 1008,
      reason: 'this call already had its stream',
    });
    // A ticket this gateway gave eleven minutes ago, never used.
    const then = Date.now() - 11 * 60_000;
    const old = new TwilioAuth(AUTH_TOKEN, PUBLIC_URL, 'wss://voice.example.test/twilio/media', () => then).ticket('CA0205');
    const late = await s.twilio.openStream('CA0205', answer, { ticket: old });
    expect(await until<{ code: number; reason: string }>(late, 'closed')).toEqual({
      code: 1008,
      reason: 'not a call this gateway answered',
    });
    expect(s.realtime.attempts).toBe(1);
  });

  it('a status callback: signature checked; a completed call ends its live session and writes the record', async () => {
    s = await bridgeStack();
    s.realtime.brain = brain({});
    await s.twilio.call('CA0206');
    await until(s.realtime, 'connection');
    const status = { CallSid: 'CA0206', CallStatus: 'completed', AccountSid: ACCOUNT_SID };
    const post = (signature: string) =>
      fetch(`${s!.twilio.opts.gateway}/twilio/status`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-twilio-signature': signature },
        body: new URLSearchParams(status).toString(),
      });
    expect((await post('forged')).status).toBe(403);
    expect(s.ended).toEqual([]);
    expect((await post(getExpectedTwilioSignature(AUTH_TOKEN, `${PUBLIC_URL}/twilio/status`, status))).status).toBe(204);
    expect((await s.endOf('CA0206')).record).toMatchObject({ call_id: 'CA0206', ended_reason: 'caller_hangup' });
  });
});

describe("phone bridge: a call ended with no live stream, on the voice service's clock", () => {
  // The status callback dated the end on the wall clock, the call's start on the service's: with a
  // clock of its own ahead (the launch drill moves it to business hours) the end came before the
  // start, the record was refused and the call never recorded.
  it('a status callback for a call whose stream never came writes its record, dated on that clock', async () => {
    const ahead = 3 * 24 * 3600_000;
    s = await bridgeStack(undefined, { statusGraceMs: 1, now: () => new Date(Date.now() + ahead) });
    expect((await s.twilio.placeCall(form('CA0207'))).status).toBe(200);
    const status = { CallSid: 'CA0207', AccountSid: ACCOUNT_SID, CallStatus: 'completed' };
    expect((await s.twilio.callback(`${PUBLIC_URL}/twilio/status`, status)).status).toBe(204);
    const end = await s.endOf('CA0207');
    expect(end.record).toMatchObject({ call_id: 'CA0207', outcome: 'abandoned' });
    expect(Date.parse(end.record!.started_at) - Date.now()).toBeGreaterThan(ahead - 60_000);
    expect(end.record!.duration_s).toBeGreaterThanOrEqual(0);
    expect(end.record!.duration_s).toBeLessThan(60);
  });
});

describe('phone bridge inside the gateway (createStack)', () => {
  const prefix = `test-bridge-stack-${process.pid}`;
  afterEach(async () => {
    const redis = new Redis(TEST_REDIS_URL);
    const keys = await redis.keys(`${prefix}:*`);
    if (keys.length) await redis.del(...keys);
    redis.disconnect();
  });

  function env(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
    const dir = mkdtempSync(join(tmpdir(), 'bridge-stack-'));
    const c = filled();
    c.meta.business_hours_local = 'Mon-Sun 00:00-24:00';
    writeFileSync(join(dir, 'concierge.json'), JSON.stringify(c));
    return {
      CONCIERGE_FILE: join(dir, 'concierge.json'),
      VOICE_TOKEN: 'voice-secret',
      QUEUE_STORE_URL: TEST_REDIS_URL,
      REDIS_PREFIX: prefix,
      METER_CSV_FILE: join(dir, 'e.csv'),
      CALLS_CSV_FILE: join(dir, 'calls.csv'),
      SCOPES_FILE: join(dir, 'none.yaml'),
      HOT_BASE_URL: 'http://127.0.0.1:9/v1',
      PUBLIC_URL,
      OPENAI_API_KEY: API_KEY,
      TWILIO_ACCOUNT_SID: ACCOUNT_SID,
      TWILIO_AUTH_TOKEN: AUTH_TOKEN,
      ...extra,
    };
  }

  it('the server takes /twilio/voice and the /twilio/media upgrade; secrets never reach the logs', async () => {
    const lines: string[] = [];
    const h = await listenStack(env(), { http: true, worker: false }, captureLogger(lines));
    try {
      const body = new URLSearchParams(form('CA0301')).toString();
      const post = (signature: string) =>
        fetch(`${h.url}/twilio/voice`, {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-twilio-signature': signature },
          body,
        });
      expect((await post('')).status).toBe(403);
      const ok = await post(getExpectedTwilioSignature(AUTH_TOKEN, `${PUBLIC_URL}/twilio/voice`, form('CA0301')));
      expect(ok.status).toBe(200);
      expect(ok.headers.get('content-type')).toMatch(/^text\/xml/);
      expect(await ok.text()).toContain('<Stream url="wss://voice.example.test/twilio/media">');
      // The callbacks the TwiML names are served by the gateway's own server, signature-checked.
      for (const path of ['/twilio/voicemail/recording', '/twilio/voicemail/recorded', '/twilio/dial'])
        expect(
          (await fetch(`${h.url}${path}`, { method: 'POST', headers: { 'x-twilio-signature': 'x' }, body: 'CallSid=CA0301' })).status,
        ).toBe(403);
      const refused = new WebSocket(`${h.url.replace('http', 'ws')}/twilio/media`, { headers: { 'x-twilio-signature': 'bad' } });
      const status = await new Promise<number>((r) => refused.once('unexpected-response', (_q, res) => r(res.statusCode!)));
      expect(status).toBe(403);
      const elsewhere = new WebSocket(`${h.url.replace('http', 'ws')}/v1/other`);
      await new Promise((r) => elsewhere.once('error', r));
    } finally {
      await h.stop();
    }
    const all = lines.join('\n');
    expect(all).toContain('phone bridge: Twilio webhooks at https://voice.example.test/twilio/voice');
    expect(all).not.toContain(AUTH_TOKEN);
    expect(all).not.toContain(API_KEY);
  });

  // Connections are half-open in node, and one node's reader has handed over has no timeout left:
  // a refused handshake's, ended only, stayed open as long as its client kept its side so.
  it(
    'a refused media stream handshake from a client that keeps its side open is closed once its 403 is sent',
    { timeout: 5000 },
    async () => {
      const h = await listenStack(env(), { http: true, worker: false });
      try {
        const closed = new Promise<string>((resolve) =>
          h.server.once('connection', (c: Socket) => c.once('close', () => resolve('closed'))),
        );
        const socket = connect({ port: Number(new URL(h.url).port), host: '127.0.0.1', allowHalfOpen: true });
        let got = '';
        socket.on('data', (d) => (got += d));
        const ended = new Promise((resolve) => socket.once('end', resolve));
        socket.write(
          'GET /twilio/media HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n' +
            'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nX-Twilio-Signature: bad\r\n\r\n',
        );
        await ended;
        expect(got).toMatch(/^HTTP\/1\.1 403 /);
        expect(await closed).toBe('closed');
        socket.destroy();
      } finally {
        await h.stop();
      }
    },
  );

  it('a refused signature is logged with the URL it was checked over and what to fix (behind a proxy: PUBLIC_URL)', async () => {
    const lines: string[] = [];
    const h = await listenStack(env(), { http: true, worker: false }, captureLogger(lines));
    try {
      // Twilio called http:// (a number set up with the proxy's own scheme): signed over that URL.
      const signedElsewhere = getExpectedTwilioSignature(AUTH_TOKEN, 'http://voice.example.test/twilio/voice', form('CA0302'));
      const res = await fetch(`${h.url}/twilio/voice`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-twilio-signature': signedElsewhere },
        body: new URLSearchParams(form('CA0302')).toString(),
      });
      expect([res.status, await res.text()]).toEqual([403, 'invalid Twilio signature']);
      await fetch(`${h.url}/twilio/status`, { method: 'POST', body: 'CallSid=CA0302' });
      const refused = new WebSocket(`${h.url.replace('http', 'ws')}/twilio/media`, { headers: { 'x-twilio-signature': 'bad' } });
      await new Promise((r) => refused.once('unexpected-response', r));
    } finally {
      await h.stop();
    }
    const msgs = lines.map((l) => JSON.parse(l).msg as string);
    expect(msgs).toContainEqual(
      expect.stringMatching(
        /^twilio webhook \/twilio\/voice: refused \(.+\): X-Twilio-Signature does not match https:\/\/voice\.example\.test\/twilio\/voice: .*PUBLIC_URL must be the origin of the number's webhook URL.*TWILIO_AUTH_TOKEN/,
      ),
    );
    expect(msgs).toContainEqual(expect.stringMatching(/^twilio webhook \/twilio\/status: refused \(.+\): no X-Twilio-Signature/));
    expect(msgs).toContainEqual(
      expect.stringMatching(
        /^twilio media: refused a stream handshake \(.+\): X-Twilio-Signature does not match wss:\/\/voice\.example\.test\/twilio\/media: /,
      ),
    );
    expect(msgs.join('\n')).not.toContain(AUTH_TOKEN);
  });

  it('a flood of unsigned requests on the public Twilio paths writes a few log lines, not one each', async () => {
    const lines: string[] = [];
    const h = await listenStack(env(), { http: true, worker: false }, captureLogger(lines));
    const flood = 200;
    try {
      for (let i = 0; i < flood; i++) {
        const res = await fetch(`${h.url}/twilio/${i % 2 ? 'status' : 'voice'}`, { method: 'POST', body: `CallSid=CA${i}` });
        expect(res.status).toBe(403);
        await res.arrayBuffer();
      }
      for (let i = 0; i < flood / 4; i++) {
        const refused = new WebSocket(`${h.url.replace('http', 'ws')}/twilio/media`, { headers: { 'x-twilio-signature': 'bad' } });
        await new Promise((r) => refused.once('unexpected-response', r));
      }
    } finally {
      await h.stop();
    }
    const refusals = lines.map((l) => JSON.parse(l).msg as string).filter((m) => /refused/.test(m));
    // Each kind of refusal is still said (the operator's first clue to a wrong PUBLIC_URL), a
    // second time at most (a minute later, with the count of those not logged), not 250 times.
    for (const kind of [/^twilio webhook \/twilio\/voice: refused/, /^twilio webhook \/twilio\/status: refused/, /^twilio media: refused/])
      expect(refusals.filter((m) => kind.test(m)).length).toBeGreaterThanOrEqual(1);
    expect(refusals.length).toBeLessThanOrEqual(6);
  });

  it("a response metered UNPRICED counts in /health's unpriced_calls and gateway_unpriced_calls_total, as a routed call's does", async () => {
    const realtime = await new RealtimePeer().start();
    realtime.brain = brain({ greeting: { audio: assistantAudio(300), usage: null } });
    const twilio = await new TwilioPeer({ gateway: '', publicUrl: PUBLIC_URL, authToken: AUTH_TOKEN, accountSid: ACCOUNT_SID }).start();
    const extra = { OPENAI_REALTIME_URL: realtime.url, TWILIO_API_URL: twilio.apiUrl, ADMIN_TOKEN: 'admin-secret' };
    const vars = env(extra);
    const h = await listenStack(vars);
    twilio.opts.gateway = h.url;
    const admin = (path: string) => fetch(`${h.url}${path}`, { headers: { authorization: 'Bearer admin-secret' } });
    try {
      const call = await twilio.call('CA0303');
      await until(call, 'frame', () => call.playedBytes > 0 && call.playedBytes === call.receivedBytes, 'the greeting heard');
      call.hangUp();
      const unpriced = async () => ((await (await admin('/health')).json()) as { unpriced_calls: { total: number } }).unpriced_calls;
      const csv = () => (existsSync(vars.METER_CSV_FILE!) ? readFileSync(vars.METER_CSV_FILE!, 'utf8') : '');
      await poll('the response metered UNPRICED', () => csv().includes('UNPRICED'));
      expect(await unpriced()).toEqual({ total: 1, by_route: { 'openai:gpt-realtime-mini': 1 } });
      expect(await (await admin('/metrics')).text()).toContain('gateway_unpriced_calls_total{route="openai:gpt-realtime-mini"} 1');
    } finally {
      await h.stop();
      await twilio.stop();
      await realtime.stop();
    }
  });

  it('an http PUBLIC_URL: the start log warns that Twilio opens no ws:// media stream', async () => {
    const lines: string[] = [];
    const h = await listenStack(env({ PUBLIC_URL: 'http://voice.example.test' }), { http: true, worker: false }, captureLogger(lines));
    await h.stop();
    const warned = lines.map((l) => JSON.parse(l)).filter((l) => l.level === 40 && /PUBLIC_URL is http:\/\//.test(l.msg));
    expect(warned.map((l) => l.msg)).toEqual([expect.stringContaining('Twilio refuses (error 31922, wss:// only)')]);
  });

  // From a secret file (`kubectl create secret --from-file`): the token's last newline went into every
  // signature check (each call refused as not from Twilio), and the key's into the realtime handshake.
  it('a Twilio token or realtime key with a line break or spaces around it turns the bridge off, naming it (no values)', async () => {
    const lines: string[] = [];
    const spaced = env({ TWILIO_AUTH_TOKEN: `${AUTH_TOKEN}\n`, OPENAI_API_KEY: ` ${API_KEY}` });
    const h = await listenStack(spaced, { http: true, worker: false }, captureLogger(lines));
    try {
      const params = form('CA0401');
      const signature = getExpectedTwilioSignature(AUTH_TOKEN, `${PUBLIC_URL}/twilio/voice`, params);
      const res = await fetch(`${h.url}/twilio/voice`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-twilio-signature': signature },
        body: new URLSearchParams(params).toString(),
      });
      const around = "expected no spaces or line breaks around it (a secret file's last newline?)";
      expect([res.status, await res.text()]).toEqual([503, `phone bridge off: OPENAI_API_KEY: ${around}; TWILIO_AUTH_TOKEN: ${around}`]);
      expect(lines.join('\n')).not.toContain(AUTH_TOKEN);
    } finally {
      await h.stop();
    }
  });

  it('without PUBLIC_URL the webhooks answer 503 naming what is missing (no values)', async () => {
    const h = await listenStack(env({ PUBLIC_URL: '' }));
    try {
      const res = await fetch(`${h.url}/twilio/voice`, { method: 'POST', body: 'CallSid=CA1' });
      expect(res.status).toBe(503);
      const text = await res.text();
      expect(text).toBe('phone bridge off: PUBLIC_URL is not set');
      expect((await fetch(`${h.url}/twilio/dial`, { method: 'POST', body: 'CallSid=CA1' })).status).toBe(503);
    } finally {
      await h.stop();
    }
  });
});
