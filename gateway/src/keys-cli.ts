/**
 * `npm run keys -- <command>`: client keys, in the store the gateway reads (Redis with
 * QUEUE_STORE_URL and REDIS_PREFIX, else CLIENT_KEYS_FILE), so run it with the gateway's environment.
 *   create <tenant> [--rpm N] [--tpm N] [--models a,b]   makes a key; the key is the last line, shown once
 *   list                                                 one line per key, its id first; never the key
 *   revoke <key id> | <key>                              refused by every gateway within a few seconds; the key
 *                                                        itself (a leaked one) is matched by its hash, never printed
 * Exit 0 done (or `--help`, which opens no store), 1 failed (no such key, store unreachable), 2 bad arguments or environment.
 */
import type { Redis } from 'ioredis';
import { commandStore, NO_ANSWER, timedOut } from './command-store';
import { createKey, hashKey, looksLikeKey, TENANT_PATTERN, type ClientKey, type KeySpec } from './client-keys';
import { readEnv } from './env';
import { ConfigError } from './errors';
import { asksForHelp } from './help';
import { keyStoreFor } from './stores';

type Print = (line: string) => void;

const USAGE = 'usage: npm run keys -- create <tenant> [--rpm N] [--tpm N] [--models a,b] | list | revoke <key id or key>';
const WHERE =
  'acts on the store the gateway reads: Redis at QUEUE_STORE_URL (REDIS_PREFIX), else CLIENT_KEYS_FILE: docs/gateway.md#client-keys';
const KEY_ID = /^key_[0-9a-f]{8}$/;

/** Bad arguments: the message names the argument and what was expected. */
class UsageError extends Error {}

/** A refusal's quote of the arguments with any key in them not shown (a leaked key pasted after `list`, or as the command). */
const keysHidden = (text: string) => text.replace(/gk_[A-Za-z0-9_-]+/g, 'gk_… (not shown)');

function wholeNumber(name: string, value: string | undefined): number {
  const n = Number(value);
  if (value === undefined || !/^\d+$/.test(value) || n < 1 || n > 1e9)
    throw new UsageError(`${name}: expected a whole number from 1 to 1000000000, got ${value === undefined ? 'nothing' : `"${value}"`}`);
  return n;
}

function modelList(value: string | undefined): string[] {
  const models = (value ?? '').split(',').map((m) => m.trim());
  if (!value || models.some((m) => !m))
    throw new UsageError(`--models: expected model names separated by commas (e.g. gpt-4o-mini,gpt-4o), got "${value ?? ''}"`);
  // As for the tenant: a pasted key would be kept in plain text, printed, and quoted to clients refused a model.
  if (models.some((m) => m.startsWith('gk_')))
    throw new UsageError('--models: got a client key (gk_…, not shown) where a model name goes; a model may not start with "gk_"');
  return models;
}

/** `create`'s arguments: the tenant, then options as `--rpm 60` or `--rpm=60`. */
function parseCreate(args: string[]): KeySpec {
  const [tenant, ...rest] = args;
  if (!tenant || tenant.startsWith('--'))
    throw new UsageError('tenant: expected the tenant the key is for, e.g. npm run keys -- create acme');
  // A pasted key would be kept in plain text as the tenant, printed, and written into every meter event and log line.
  if (tenant.startsWith('gk_'))
    throw new UsageError('tenant: got a client key (gk_…, not shown) where the tenant\'s name goes; a tenant may not start with "gk_"');
  if (!TENANT_PATTERN.test(tenant))
    throw new UsageError(`tenant: expected 1-64 letters, digits, . _ @ - (starting with a letter or digit), got "${tenant.slice(0, 80)}"`);
  const spec: KeySpec = { tenant };
  const given = new Set<string>();
  for (let i = 0; i < rest.length; i++) {
    const [flag, inline] = rest[i].split(/=(.*)/s, 2);
    const value = inline ?? rest[++i];
    // Twice, one of the two was a slip: which was meant is not ours to guess (the last one won).
    if (given.has(flag)) throw new UsageError(`${flag}: given twice; give it once`);
    given.add(flag);
    if (flag === '--rpm') spec.rpm = wholeNumber('--rpm', value);
    else if (flag === '--tpm') spec.tpm = wholeNumber('--tpm', value);
    else if (flag === '--models') spec.models = modelList(value);
    else
      throw new UsageError(`${flag.startsWith('--') ? 'option' : 'argument'} "${flag}": create takes a tenant and --rpm, --tpm, --models`);
  }
  return spec;
}

const limits = (k: Pick<ClientKey, 'rpm' | 'tpm' | 'models'>) =>
  `rpm=${k.rpm ?? 'none'} tpm=${k.tpm ?? 'none'} models=${k.models.length ? k.models.join(',') : 'any'}`;

/** One `list` line: the key id first. */
const listLine = (k: ClientKey) =>
  `${k.id} tenant=${k.tenant} ${limits(k)} created=${k.created} last_used=${k.lastUsed ?? 'never'} ${k.revoked ? `revoked=${k.revoked}` : 'valid'}`;

/** What revoke names: a key id, or the key itself (one that leaked, whose id nobody noted), kept only as its hash. */
type Target = { id: string } | { hash: string };

/** A checked command: its arguments are read before the store is opened, so a typo never waits for it or reaches it. */
type Command = { command: 'create'; spec: KeySpec } | { command: 'list' } | { command: 'revoke'; target: Target };

/**
 * Revoke's arguments as a refusal quotes them: never what may be a key, even one cut short or pasted
 * with what stood around it where it leaked (`KEY=gk_…`, `Bearer gk_…`, a JSON string).
 */
const quotedArgs = (args: string[]) =>
  !args.length
    ? 'nothing'
    : args.some((a) => a.includes('gk_'))
      ? 'text holding "gk_" that is not a whole key (not shown)'
      : `"${args.join(' ')}"`;

function parseRevoke(args: string[]): Command {
  const [given, extra] = args;
  if (given && extra === undefined && looksLikeKey(given)) return { command: 'revoke', target: { hash: hashKey(given) } };
  if (!given || !KEY_ID.test(given) || extra !== undefined)
    throw new UsageError(`key id: expected one id as list shows it ("key_" and 8 hex digits), or the key itself, got ${quotedArgs(args)}`);
  return { command: 'revoke', target: { id: given } };
}

function parseCommand(command: string, args: string[]): Command {
  if (command === 'create') return { command, spec: parseCreate(args) };
  if (command === 'list') {
    if (args.length) throw new UsageError(`list: expected no arguments, got "${args[0]}"`);
    return { command };
  }
  return parseRevoke(args);
}

/** The id of the key revoke names, or null (said on `err`) when the store has none. */
async function idOf(target: Target, store: ReturnType<typeof keyStoreFor>, err: Print): Promise<string | null> {
  if ('id' in target) return target.id;
  const [record] = await store.find([target.hash]);
  if (!record) err(`no key of that value in ${store.where} (it was not made by npm run keys for this store)`);
  return record?.id ?? null;
}

async function run(todo: Command, store: ReturnType<typeof keyStoreFor>, out: Print, err: Print) {
  if (todo.command === 'create') {
    const { key, record } = await createKey(store, todo.spec);
    out(`made ${record.id} for tenant ${record.tenant}: ${limits(record)}; only its hash is kept, in ${store.where}`);
    out('Give this key to the tenant now: it is shown only this once.');
    out(key);
    return 0;
  }
  if (todo.command === 'list') {
    const keys = (await store.list()).sort((a, b) => a.created.localeCompare(b.created));
    for (const k of keys) out(listLine(k));
    err(`${keys.length} key(s), ${keys.filter((k) => !k.revoked).length} valid, in ${store.where}`);
    return 0;
  }
  const id = await idOf(todo.target, store, err);
  if (id === null) return 1;
  const at = new Date();
  const revoked = await store.revoke(id, at);
  if (!revoked) {
    err(`no key ${id} in ${store.where} (npm run keys -- list shows the ids)`);
    return 1;
  }
  // A key revoked before keeps its time: said as such, not as a revocation made now.
  if (revoked.revoked !== at.toISOString())
    out(`already revoked ${id} (tenant ${revoked.tenant}) at ${revoked.revoked}: every gateway refuses it; nothing changed`);
  else out(`revoked ${id} (tenant ${revoked.tenant}) at ${revoked.revoked}: every gateway refuses it within a few seconds`);
  return 0;
}

export async function keysCli(args: string[], rawEnv: NodeJS.ProcessEnv, out: Print, err: Print): Promise<number> {
  if (asksForHelp(args)) {
    out(`${USAGE}\n${WHERE}`);
    return 0;
  }
  const [command, ...rest] = args;
  if (!['create', 'list', 'revoke'].includes(command ?? '')) {
    err(command ? keysHidden(`unknown command "${command}": expected create, list or revoke`) : 'command: expected create, list or revoke');
    err(USAGE);
    return 2;
  }
  let redis: Redis | null = null;
  try {
    const todo = parseCommand(command!, rest);
    const env = readEnv(rawEnv);
    if (env.production && !env.QUEUE_STORE_URL)
      throw new ConfigError('QUEUE_STORE_URL: required with NODE_ENV=production (the gateways read their keys from Redis)');
    if (env.QUEUE_STORE_URL) redis = await commandStore(env.QUEUE_STORE_URL);
    return await run(todo, keyStoreFor(env, redis), out, err);
  } catch (error) {
    if (error instanceof UsageError || error instanceof ConfigError) {
      err(error instanceof UsageError ? keysHidden(error.message) : error.message);
      if (error instanceof UsageError) err(USAGE);
      return 2;
    }
    err(`key store: ${timedOut(error) ? NO_ANSWER : (error as Error).message}`);
    return 1;
  } finally {
    redis?.disconnect();
  }
}
