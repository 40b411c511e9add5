// Response owners, one contract for both stores: in the real Redis (keys under a prefix of this
// process, removed afterwards) and in process, through the interface.
import { describe, expect, it } from 'vitest';
import { MemoryResponseOwners, RedisResponseOwners, type ResponseOwners } from '../../gateway/src/response-owners';
import { redisUnderPrefix } from '../redis-prefix';

const db = redisUnderPrefix('response-owners');
const prefix = db.prefix;

const stores: Array<[string, () => ResponseOwners]> = [
  ['redis', () => new RedisResponseOwners(db.redis, prefix)],
  ['memory', () => new MemoryResponseOwners()],
];

describe.each(stores)('%s', (_, make) => {
  it('answers the owner (tenant and provider) of each id in order, null for ids never claimed; a claimed id keeps its first owner', async () => {
    const owners = make();
    const acme = { tenant: 'acme', provider: 'openai' };
    const globex = { tenant: 'globex', provider: 'azure-openai' };
    await owners.claim(acme, ['resp_1', 'msg_1']);
    await owners.claim(globex, ['resp_1', 'resp_2']);
    expect(await owners.owners(['msg_1', 'resp_2', 'resp_3', 'resp_1'])).toEqual([acme, globex, null, acme]);
  });
});

it('the in-process store forgets its oldest ids past its size, and every id after 30 days', async () => {
  let now = 0;
  const owners = new MemoryResponseOwners(2, () => now);
  const acme = { tenant: 'acme', provider: 'openai' };
  await owners.claim(acme, ['a', 'b']);
  await owners.claim(acme, ['c']);
  expect(await owners.owners(['a', 'b', 'c'])).toEqual([null, acme, acme]);
  now = 30 * 24 * 3600_000;
  expect(await owners.owners(['b', 'c'])).toEqual([null, null]);
});
