// Telephony prices from the pricing service: only a price is a price (money is never made up).
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fetchCountryRates } from '../../gateway/src/voice/rates';

/** The pricing service answering `local`'s current price as `price` (Twilio sends prices as strings). */
let pricing: Server;
let url = '';
let price: unknown = '0.0085';
beforeAll(async () => {
  pricing = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' }).end(
      JSON.stringify({
        price_unit: 'USD',
        inbound_call_prices: [{ number_type: 'local', base_price: '0.0085', current_price: price }],
        outbound_prefix_prices: [],
      }),
    );
  });
  await new Promise<void>((r) => pricing.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(pricing.address() as AddressInfo).port}`;
});
afterAll(() => pricing.close());

const fetchUs = () => fetchCountryRates('US', { baseUrl: url, sid: 'ACsid', token: 'tok' });

describe('telephony prices', () => {
  it('takes decimal text and numbers', async () => {
    for (const [sent, read] of [
      ['0.0220', 0.022],
      ['1e-3', 0.001],
      [0.5, 0.5],
      ['0', 0],
    ] as const) {
      price = sent;
      expect((await fetchUs()).inbound.local).toBe(read);
    }
  });

  it('refuses empty or blank text, hex, a sign and Infinity as prices, naming where (they were read as 0, 16, -1 …)', async () => {
    for (const sent of ['', ' ', '0x10', '-1', '+1', 'Infinity', '1_000', true]) {
      price = sent;
      await expect(fetchUs(), JSON.stringify(sent)).rejects.toThrow(
        `US inbound_call_prices[0]: expected a price, got ${JSON.stringify(sent)}`,
      );
    }
  });
});
