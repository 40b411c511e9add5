// Cap alerts (checkSpendCaps): the built bundle in node:vm, with a clock the tests control.
// One describe per feature: long because each behaviour is a short test of its own.
import { runInContext, type Context } from 'node:vm';
import { beforeEach, describe, expect, it } from 'vitest';
import type { Bundle, FakePlatform } from './fakes/platform';
import { WEBHOOK, freshMeter, post, setConfig } from './maintenance-setup';

describe('checkSpendCaps', () => {
  let platform: FakePlatform;
  let meter: Bundle;
  beforeEach(() => {
    ({ platform, meter } = freshMeter());
    setConfig(platform, 'SLACK_WEBHOOK_URL', WEBHOOK);
  });

  /** Yesterday ends over its $5 daily cap after its last check ($6 at 23:55), and today is over it too ($7). */
  function bothDaysOverTheDailyCap(): void {
    setConfig(platform, 'DAILY_CAP_USD', 5);
    platform.clock.set('2026-11-22T23:50:00Z');
    expect(meter.checkSpendCaps()).toMatch(/under both caps/);
    platform.clock.set('2026-11-22T23:55:00Z');
    post(meter, { cost_usd: 6 });
    platform.clock.set('2026-11-23T00:00:30Z');
    post(meter, { cost_usd: 7 });
  }

  it('the smoke test (docs/meter.md): with the daily cap at 0.01 the alert fires once; reset, it stays quiet', () => {
    post(meter, { events: [{ cost_usd: 0.05 }, { cost_usd: 3.1 }] });
    setConfig(platform, 'DAILY_CAP_USD', 0.01);
    meter.checkSpendCaps();
    expect(platform.urlFetch.requests).toHaveLength(1);
    const [req] = platform.urlFetch.requests;
    expect(req.url).toBe(WEBHOOK);
    expect(req.options).toMatchObject({ method: 'post', contentType: 'application/json' });
    const body = platform.urlFetch.payloads()[0];
    expect(body.blocks.map((b: { type: string }) => b.type)).toEqual(['header', 'section', 'context']);
    expect(body.blocks[0].text.text).toMatch(/spend alert/i);
    const fields = body.blocks[1].fields.map((f: { text: string }) => f.text).join('\n');
    expect(fields).toContain('$3.1500 of $0.01 cap'); // today: 4 decimals
    expect(fields).toContain('$3.15 of $200.00 cap'); // 7 days: 2 decimals
    expect(body.text).toMatch(/daily cap crossed.*\$3\.1500.*\$3\.15/);

    meter.checkSpendCaps();
    meter.checkSpendCaps();
    expect(platform.urlFetch.requests).toHaveLength(1);

    setConfig(platform, 'DAILY_CAP_USD', 50);
    expect(meter.checkSpendCaps()).toMatch(/under both caps/);
    expect(platform.urlFetch.requests).toHaveLength(1);
  });

  it('alerts again the next UTC day while the cap is still crossed', () => {
    setConfig(platform, 'DAILY_CAP_USD', 1);
    post(meter, { cost_usd: 2 });
    meter.checkSpendCaps();
    platform.clock.set('2026-11-23T00:05:00Z');
    meter.checkSpendCaps(); // new day: today's cost is 0, nothing to say
    expect(platform.urlFetch.requests).toHaveLength(1);
    post(meter, { cost_usd: 1.5 });
    meter.checkSpendCaps();
    expect(platform.urlFetch.requests).toHaveLength(2);
  });

  it('a daily cap crossed after the last check of a UTC day is alerted on the next run, naming that day, once (a failed post retried)', () => {
    setConfig(platform, 'DAILY_CAP_USD', 5);
    platform.clock.set('2026-11-22T23:50:00Z');
    post(meter, { cost_usd: 2 });
    expect(meter.checkSpendCaps()).toMatch(/under both caps/);
    platform.clock.set('2026-11-22T23:55:00Z');
    post(meter, { cost_usd: 4 }); // the day's cost is now $6, over the $5 cap, and no check runs before midnight
    platform.clock.set('2026-11-23T00:00:30Z');
    platform.urlFetch.respond = () => ({ code: 500 });
    expect(meter.checkSpendCaps()).toMatch(/daily cap crossed on 2026-11-22 and not alerted that day, but Slack answered HTTP 500/);
    platform.urlFetch.respond = () => ({ code: 200 });
    platform.clock.set('2026-11-23T00:10:30Z');
    expect(meter.checkSpendCaps()).toMatch(/alert posted for the daily cap crossed on 2026-11-22/);
    expect(platform.urlFetch.requests).toHaveLength(2);
    const body = platform.urlFetch.payloads()[1];
    expect(body.blocks[0].text.text).toMatch(/daily cap crossed on 2026-11-22/);
    expect(body.blocks[1].fields.map((f: { text: string }) => f.text).join('\n')).toContain('$6.0000 of $5.00 cap');
    expect(body.text).toMatch(/daily cap crossed on 2026-11-22/);
    meter.checkSpendCaps();
    platform.clock.set('2026-11-24T00:00:30Z');
    meter.checkSpendCaps();
    expect(platform.urlFetch.requests).toHaveLength(2);
  });

  it("a late alert of yesterday's daily cap that goes through after today's did does not make today's go out again", () => {
    bothDaysOverTheDailyCap();
    let posts = 0;
    platform.urlFetch.respond = () => ({ code: ++posts === 1 ? 500 : 200 }); // the late alert fails, today's goes through
    expect(meter.checkSpendCaps()).toMatch(/not alerted that day, but Slack answered HTTP 500.*alert posted for daily/);
    platform.clock.set('2026-11-23T00:10:30Z');
    expect(meter.checkSpendCaps()).toMatch(/alert posted for the daily cap crossed on 2026-11-22.*already alerted today/);
    platform.clock.set('2026-11-23T00:20:30Z');
    expect(meter.checkSpendCaps()).toMatch(/already alerted today/);
    const headlines = platform.urlFetch.payloads().map((b: { blocks: Array<{ text: { text: string } }> }) => b.blocks[0].text.text);
    expect(headlines).toEqual([
      'AI spend alert: daily cap crossed on 2026-11-22',
      'AI spend alert: daily cap crossed',
      'AI spend alert: daily cap crossed on 2026-11-22',
    ]);
  });

  it('a 7-day cap crossed after the last check of a UTC day, under again at midnight, is alerted on the next run naming that day, once', () => {
    setConfig(platform, 'BURN_7D_CAP_USD', 10);
    post(meter, { timestamp: '2026-11-16T01:00:00Z', cost_usd: 6 }); // the oldest day of the 7 to 2026-11-22
    platform.clock.set('2026-11-22T23:50:00Z');
    expect(meter.checkSpendCaps()).toMatch(/under both caps/);
    platform.clock.set('2026-11-22T23:55:00Z');
    post(meter, { cost_usd: 5 }); // $11 in the 7 days, over the $10 cap, and no check runs before midnight
    platform.clock.set('2026-11-23T00:00:30Z'); // 2026-11-16 has left the window: $5, under again
    expect(meter.checkSpendCaps()).toMatch(
      /^alert posted for the 7-day cap crossed on 2026-11-22 and not alerted that day; under both caps/,
    );
    const body = platform.urlFetch.payloads()[0];
    expect(body.blocks[0].text.text).toBe('AI spend alert: 7-day cap crossed on 2026-11-22');
    expect(body.blocks[1].fields.map((f: { text: string }) => f.text).join('\n')).toContain('$11.00 of $10.00 cap');
    expect(body.text).toContain('7 days to 2026-11-22: $11.00 of $10.00 7-day cap');
    platform.clock.set('2026-11-23T00:10:30Z');
    expect(meter.checkSpendCaps()).toMatch(/^under both caps/);
    expect(platform.urlFetch.requests).toHaveLength(1);
  });

  it("a row whose timestamp is not a date stays out of the day before's 7 days too: no late alert for a cap its cost alone crosses", () => {
    setConfig(platform, 'BURN_7D_CAP_USD', 10);
    post(meter, {
      events: [
        { event_id: 'measured', cost_usd: 2 },
        { event_id: 'typed', cost_usd: 80 },
      ],
    });
    // A date typed in another locale's order: Sheets keeps it as text, and every total leaves its row out.
    const typed = platform.spreadsheet.tab('events')!.data.find((r) => r[0] === 'typed')!;
    typed[1] = '22/11/2026 10:00';
    platform.clock.set('2026-11-22T23:50:00Z');
    expect(meter.checkSpendCaps()).toMatch(/^under both caps \(today \$2\.0000, 7 days \$2\.00\)/);
    platform.clock.set('2026-11-23T00:00:30Z');
    expect(meter.checkSpendCaps()).toMatch(/^under both caps/);
    expect(platform.urlFetch.requests).toHaveLength(0);
  });

  it("a 7-day cap still crossed today is alerted once, as today's, not also as the day before's", () => {
    setConfig(platform, 'BURN_7D_CAP_USD', 10);
    post(meter, { timestamp: '2026-11-20T01:00:00Z', cost_usd: 6 });
    platform.clock.set('2026-11-22T23:50:00Z');
    expect(meter.checkSpendCaps()).toMatch(/under both caps/);
    platform.clock.set('2026-11-22T23:55:00Z');
    post(meter, { cost_usd: 5 });
    platform.clock.set('2026-11-23T00:00:30Z');
    expect(meter.checkSpendCaps()).toBe('alert posted for burn7d');
    expect(platform.urlFetch.payloads().map((b: { blocks: Array<{ text: { text: string } }> }) => b.blocks[0].text.text)).toEqual([
      'AI spend alert: 7-day cap crossed',
    ]);
  });

  it('a late alert that went out before a Sheets call of the same run timed out is not posted again by the next run', () => {
    setConfig(platform, 'DAILY_CAP_USD', 5);
    setConfig(platform, 'BURN_7D_CAP_USD', 8);
    platform.clock.set('2026-11-22T23:50:00Z');
    expect(meter.checkSpendCaps()).toMatch(/under both caps/);
    platform.clock.set('2026-11-22T23:55:00Z');
    post(meter, { cost_usd: 6 }); // yesterday ends over its daily cap, after its last check
    platform.clock.set('2026-11-23T00:00:30Z');
    post(meter, { cost_usd: 3 }); // and the 7 days are over theirs: today's alert follows the late one
    // Slack takes the late alert; any Sheets call the run makes after it times out (and ends the run).
    platform.calls.failAfter((name) => name === 'UrlFetchApp.fetch');
    try {
      meter.checkSpendCaps();
    } catch (error) {
      expect(String(error)).toMatch(/timed out/);
    }
    platform.clock.set('2026-11-23T00:10:30Z');
    meter.checkSpendCaps();
    const headlines = platform.urlFetch.payloads().map((b: { blocks: Array<{ text: { text: string } }> }) => b.blocks[0].text.text);
    expect(headlines.filter((h: string) => h === 'AI spend alert: daily cap crossed on 2026-11-22')).toHaveLength(1);
    expect(headlines).toContain('AI spend alert: 7-day cap crossed');
  });

  it('a run whose read of the alert state fails posts nothing: no alert is repeated, none is lost', () => {
    bothDaysOverTheDailyCap();
    const stateReadFails = () =>
      platform.calls.failAfter(
        () => true,
        (name) => name === 'Properties.getProperty',
        'Service Properties failed',
      );
    stateReadFails();
    expect(() => meter.checkSpendCaps()).toThrow(/Service Properties failed/);
    platform.clock.set('2026-11-23T00:10:30Z');
    meter.checkSpendCaps();
    platform.clock.set('2026-11-23T12:00:00Z');
    stateReadFails();
    expect(() => meter.checkSpendCaps()).toThrow(/Service Properties failed/);
    expect(meter.checkSpendCaps()).toMatch(/already alerted today/);
    const headlines = platform.urlFetch.payloads().map((b: { blocks: Array<{ text: { text: string } }> }) => b.blocks[0].text.text);
    expect(headlines).toEqual(['AI spend alert: daily cap crossed on 2026-11-22', 'AI spend alert: daily cap crossed']);
  });

  it('an alert state edited by hand into JSON that is not an object (null, a number) counts as empty: the alert still goes out', () => {
    // It failed every run with a TypeError (reading or setting a field of null or of a number), so
    // no cap was ever alerted until someone found the property.
    post(meter, { cost_usd: 60 });
    for (const edited of ['null', '5', '"reset"', '[]']) {
      platform.properties.setProperty('SPEND_ALERT_STATE', edited);
      expect(meter.checkSpendCaps()).toMatch(/alert posted for daily/);
      expect(JSON.parse(platform.properties.getProperty('SPEND_ALERT_STATE')!)).toMatchObject({ daily: '2026-11-22' });
    }
    expect(platform.urlFetch.payloads()).toHaveLength(4);
  });

  it('a crossed 7-day cap alerts too, counting the 6 days before today', () => {
    setConfig(platform, 'BURN_7D_CAP_USD', 10);
    post(meter, {
      events: [
        { timestamp: '2026-11-16T01:00:00Z', cost_usd: 6 },
        { timestamp: '2026-11-20T01:00:00Z', cost_usd: 5 },
      ],
    });
    meter.checkSpendCaps();
    const body = platform.urlFetch.payloads()[0];
    expect(body.blocks[0].text.text).toMatch(/7-day cap crossed/);
    expect(body.blocks[0].text.text).not.toMatch(/daily/);
  });

  it('a cost just over its cap, or a cap below a cent, reads as over it: more decimals where the usual ones hide the difference', () => {
    setConfig(platform, 'BURN_7D_CAP_USD', 200);
    setConfig(platform, 'DAILY_CAP_USD', 0.005);
    post(meter, {
      events: [
        { timestamp: '2026-11-20T01:00:00Z', cost_usd: 199.998 },
        { timestamp: '2026-11-22T01:00:00Z', cost_usd: 0.006 },
      ],
    });
    meter.checkSpendCaps();
    const body = platform.urlFetch.payloads()[0];
    expect(body.blocks[0].text.text).toMatch(/daily cap and 7-day cap crossed/);
    const fields = body.blocks[1].fields.map((f: { text: string }) => f.text).join('\n');
    expect(fields).toContain('$0.0060 of $0.005 cap');
    expect(fields).toContain('$200.004 of $200.00 cap'); // not "$200.00 of $200.00"
    expect(body.text).toContain('Today: $0.0060 of $0.005 daily cap.');
    expect(body.text).toContain('Last 7 days: $200.004 of $200.00 7-day cap.');
  });

  it("a cost above zero beside a crossed cap reads as above zero: today's $0.00003 is not $0.0000", () => {
    setConfig(platform, 'BURN_7D_CAP_USD', 200);
    post(meter, {
      events: [
        { timestamp: '2026-11-20T01:00:00Z', cost_usd: 250 },
        { timestamp: '2026-11-22T01:00:00Z', cost_usd: 0.00003 },
      ],
    });
    meter.checkSpendCaps();
    const body = platform.urlFetch.payloads()[0];
    expect(body.blocks[0].text.text).toMatch(/7-day cap crossed/);
    const fields = body.blocks[1].fields.map((f: { text: string }) => f.text).join('\n');
    expect(fields).toContain('$0.00003 of $50.00 cap');
    expect(body.text).toContain('Today: $0.00003 of $50.00 daily cap.');
  });

  it('a failed post is retried on the next run, and the webhook never reaches the log', () => {
    setConfig(platform, 'DAILY_CAP_USD', 1);
    post(meter, { cost_usd: 2 });
    platform.urlFetch.respond = () => ({ code: 500 });
    expect(meter.checkSpendCaps()).toMatch(/HTTP 500.*retried/);
    // Thrown as Apps Script throws: an Error of the script's own realm (the bundle's context here).
    const ScriptError = runInContext('Error', meter as unknown as Context) as ErrorConstructor;
    platform.urlFetch.respond = () => {
      throw new ScriptError(`Address unavailable: ${WEBHOOK} (retried ${WEBHOOK}; path ${new URL(WEBHOOK).pathname.slice(0, 30)})`);
    };
    expect(meter.checkSpendCaps()).toMatch(/failed.*retried/);
    expect(platform.logs.join('\n')).not.toContain('/services/'); // the webhook's secret path, whole or cut
    platform.urlFetch.respond = () => ({ code: 200 });
    expect(meter.checkSpendCaps()).toMatch(/alert posted/);
    expect(meter.checkSpendCaps()).toMatch(/already alerted/);
    expect(platform.urlFetch.requests).toHaveLength(3);
    expect(platform.logs.join('\n')).not.toContain('XXXX');
  });

  it('a post Slack took, whose state then could not be saved, is reported posted and may come again (never as a failed post)', () => {
    setConfig(platform, 'DAILY_CAP_USD', 1);
    post(meter, { cost_usd: 2 });
    platform.calls.failAfter(
      (name) => name === 'UrlFetchApp.fetch',
      (name) => name === 'Properties.setProperty',
      'Service Properties timed out',
    );
    const said = meter.checkSpendCaps();
    expect(said).toMatch(/alert posted for daily.*could not be saved \(Service Properties timed out\).*may be posted again/);
    expect(said).not.toMatch(/failed/);
    expect(platform.urlFetch.requests).toHaveLength(1);
  });

  it('two checks that overlap (the trigger, and the menu while its post is out) post one alert; a failed one is still retried', () => {
    setConfig(platform, 'DAILY_CAP_USD', 1);
    post(meter, { cost_usd: 2 });
    const overlapping: string[] = [];
    platform.urlFetch.latencyMs = 2000;
    platform.urlFetch.meanwhile = () => {
      platform.urlFetch.meanwhile = null;
      overlapping.push(meter.checkSpendCaps() as string);
    };
    expect(meter.checkSpendCaps()).toMatch(/alert posted for daily/);
    expect(overlapping).toEqual([expect.stringMatching(/another run of checkSpendCaps has been posting an alert.*posted nothing/)]);
    expect(platform.urlFetch.requests).toHaveLength(1);
    expect(meter.checkSpendCaps()).toMatch(/already alerted today/);
    expect(platform.outboundUnderLock).toEqual([]);

    // The next day, the first post fails while the other run waits: the next run posts it, once.
    platform.clock.set('2026-11-23T12:00:00Z');
    post(meter, { cost_usd: 2 });
    platform.urlFetch.respond = () => ({ code: 500 });
    platform.urlFetch.meanwhile = () => {
      platform.urlFetch.meanwhile = null;
      meter.checkSpendCaps();
    };
    expect(meter.checkSpendCaps()).toMatch(/HTTP 500/);
    platform.urlFetch.respond = () => ({ code: 200 });
    platform.clock.advance(10 * 60_000);
    expect(meter.checkSpendCaps()).toMatch(/alert posted for daily/);
    expect(meter.checkSpendCaps()).toMatch(/already alerted today/);
    expect(platform.urlFetch.requests).toHaveLength(3);
  });

  it('a check whose claim outlives it (its post failed, and so did its record) holds the others back only until the claim runs out', () => {
    setConfig(platform, 'DAILY_CAP_USD', 1);
    post(meter, { cost_usd: 2 });
    platform.urlFetch.respond = () => ({ code: 500 });
    platform.calls.failAfter(
      (name) => name === 'UrlFetchApp.fetch',
      (name) => name === 'Properties.setProperty',
      'Service Properties timed out',
    );
    expect(meter.checkSpendCaps()).toMatch(/HTTP 500.*the alert state could not be saved/);
    platform.urlFetch.respond = () => ({ code: 200 });
    platform.clock.advance(5 * 60_000);
    expect(meter.checkSpendCaps()).toMatch(/posted nothing/);
    platform.clock.advance(6 * 60_000);
    expect(meter.checkSpendCaps()).toMatch(/alert posted for daily/);
    expect(meter.checkSpendCaps()).toMatch(/already alerted today/);
    expect(platform.urlFetch.requests).toHaveLength(2);
  });

  it('a check that cannot have the script lock (retention holds it on a large tab) posts nothing and does not fail; the next run posts', () => {
    setConfig(platform, 'DAILY_CAP_USD', 1);
    post(meter, { cost_usd: 2 });
    platform.lock.busy = true;
    expect(meter.checkSpendCaps()).toMatch(/meter busy.*this run posted nothing, the next one decides/);
    expect(platform.urlFetch.requests).toHaveLength(0);
    platform.lock.busy = false;
    expect(meter.checkSpendCaps()).toMatch(/alert posted for daily/);
  });

  it('a check that fails after its claim (Sheets timing out on the link) lets the claim go: the next check posts at once', () => {
    setConfig(platform, 'DAILY_CAP_USD', 1);
    post(meter, { cost_usd: 2 });
    platform.calls.failAfter(
      (name) => name === 'Properties.setProperty',
      (name) => name === 'Spreadsheet.getUrl',
    );
    expect(() => meter.checkSpendCaps()).toThrow(/Service Spreadsheets timed out/);
    expect(platform.urlFetch.requests).toHaveLength(0);
    // The owner, mailed of the failed trigger, checks from the menu: no run is posting, so this one does.
    expect(meter.checkSpendCaps()).toMatch(/alert posted for daily/);
    expect(meter.checkSpendCaps()).toMatch(/already alerted today/);
    expect(platform.urlFetch.requests).toHaveLength(1);
  });

  it('an alert posted while the nightly export took the lock is still recorded: the check after the claim runs out does not post it again', () => {
    setConfig(platform, 'DAILY_CAP_USD', 1);
    post(meter, { cost_usd: 2 });
    platform.urlFetch.meanwhile = () => {
      platform.urlFetch.meanwhile = null;
      platform.lock.busy = true; // the export reads the whole tab under the lock, for longer than the 30 s wait
    };
    expect(meter.checkSpendCaps()).toMatch(/alert posted for daily/);
    platform.lock.busy = false;
    platform.clock.advance(11 * 60_000);
    expect(meter.checkSpendCaps()).toMatch(/already alerted today/);
    expect(platform.urlFetch.requests).toHaveLength(1);
  });

  it('with no webhook configured nothing is posted, and the run says so', () => {
    setConfig(platform, 'SLACK_WEBHOOK_URL', '');
    setConfig(platform, 'DAILY_CAP_USD', 1);
    post(meter, { cost_usd: 2 });
    expect(meter.checkSpendCaps()).toMatch(/SLACK_WEBHOOK_URL is empty/);
    expect(platform.urlFetch.requests).toHaveLength(0);
  });
});
