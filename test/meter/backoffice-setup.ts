/** A meter bundle set up for the back office (as backoffice.test.ts has it), for the fault and lock tests. */
import { FakePlatform, callJson, loadBundle } from './fakes/platform';

export const SECRET = 'bo-secret';

export function backOffice(options: { twilio?: boolean } = {}) {
  const platform = new FakePlatform();
  platform.clock.set('2026-11-22T12:00:00Z');
  const meter = loadBundle(platform);
  meter.setup();
  platform.properties.setProperty('SECRET_TOKEN', SECRET);
  const config = platform.spreadsheet.tab('Config')!;
  config.data.find((r) => r[0] === 'TIMEZONE')![1] = 'Europe/Lisbon';
  if (options.twilio) {
    platform.properties.setProperty('TWILIO_ACCOUNT_SID', 'AC1');
    platform.properties.setProperty('TWILIO_AUTH_TOKEN', 'tok');
    platform.properties.setProperty('TWILIO_FROM', '+15550001111');
  }
  platform.urlFetch.respond = (req) =>
    req.url.includes('/Messages.json')
      ? { code: 201, body: '{"sid":"SM1"}' }
      : req.url.endsWith('.mp3')
        ? { code: 200, body: 'ID3audio' }
        : { code: 404 };
  return {
    platform,
    meter,
    act: (action: string, body: unknown) => callJson(meter, 'doPost', { action, token: SECRET }, body),
    ingest: (body: unknown) => callJson(meter, 'doPost', { token: SECRET }, body),
    rows: (name: string) => platform.spreadsheet.tab(name)!.data.slice(1),
    texts: () => platform.urlFetch.requests.filter((r) => r.url.includes('/Messages.json')),
  };
}

export const booking = (key = 'key-book-0001') => ({
  call_id: 'call-1',
  idempotency_key: key,
  args: { name: 'Ana Silva', phone: '+351912345678', service: 'Haircut', date: '2027-07-01', time: '10:30', location: 'Rua Augusta 1' },
});

export const voicemail = (key = 'key-vm-00001') => ({
  call_id: 'call-4',
  idempotency_key: key,
  args: { phone: '+351910000000', recording_url: 'https://api.twilio.com/rec/RE1.mp3', transcript: 'please call me back' },
});

export const lead = (key = 'key-lead-0001') => ({
  call_id: 'call-3',
  idempotency_key: key,
  args: { name: 'Rui', phone: '+351930000000', service: 'plumbing' },
});
