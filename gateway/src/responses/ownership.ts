/**
 * Tenant isolation of stored responses (response-owners.ts keeps who owns what): which ids a
 * Responses request continues, the refusal when its tenant does not own one, and the ids a native
 * answer makes its tenant's, with the provider that keeps it (a follow-up is served only by that
 * provider's routes). Only a client key proves a request's tenant, so this runs only with
 * GATEWAY_AUTH=keys (stack.ts): without keys nothing is checked or recorded.
 *
 * A request continuing a response whose provider no route in force can serve any more (a reload
 * removed them) is refused at once, and for good: no other provider has its state, and waiting in
 * the Cold queue would only end in the dead-letter queue a day later.
 */
import { cutText } from '../../../schema/cut-text';
import { within } from '../within';
import { openAiError, type OpenAiError } from '../errors';
import type { RequestContext } from '../request-context';
import type { Owner, ResponseOwners } from '../response-owners';
import type { Route } from '../route';

/** An id a request continues, and the parameter that named it. */
interface Reference {
  id: string;
  param: string;
}

/**
 * Items a client passes back whose content the provider fills in from the stored item when it is
 * left out: a reasoning or compaction item's `encrypted_content`, an image generation call's image
 * (`result`: OpenAI's multi-turn editing passes the call by its id alone).
 */
const CONTENT: Record<string, string> = {
  reasoning: 'encrypted_content',
  compaction: 'encrypted_content',
  image_generation_call: 'result',
};

/** Whether `field` of the item carries content: an empty or odd one carries nothing, so it counts as none. */
const carries = (item: Record<string, unknown>, field: string) => typeof item[field] === 'string' && item[field] !== '';

/**
 * An input item whose content the provider reads from its store by id: OpenAI's `item_reference`
 * (`type` may be left out: an item without a type is a message only with a role and content), and
 * an item of CONTENT without its content (the stateless form, `store: false`, carries its own).
 */
const isReference = (item: Record<string, unknown>) =>
  item.type === 'item_reference' ||
  (Object.hasOwn(CONTENT, item.type as string) && !carries(item, CONTENT[item.type as string])) ||
  (item.type == null && !(typeof item.role === 'string' && item.content != null));

/** `previous_response_id` and the ids of the input items read from the store (isReference). */
function referencesOf(body: Record<string, unknown>): Reference[] {
  const found: Reference[] = [];
  if (typeof body.previous_response_id === 'string') found.push({ id: body.previous_response_id, param: 'previous_response_id' });
  if (Array.isArray(body.input))
    body.input.forEach((item: Record<string, unknown>, i) => {
      if (item && typeof item.id === 'string' && isReference(item)) found.push({ id: item.id, param: `input[${i}].id` });
    });
  return found;
}

/** The conversation a request continues (`conversation`: its id, or `{id}`), or null. */
function conversationOf(body: Record<string, unknown>): string | null {
  const c = body.conversation as { id?: unknown } | string | null | undefined;
  if (c == null) return null;
  return typeof c === 'string' ? c : typeof c.id === 'string' ? c.id : '';
}

/** A response's id and its output items' ids; none when it was not stored (it cannot be continued). */
function idsOf(response: unknown): string[] {
  const r = response as { id?: unknown; store?: unknown; output?: unknown } | null;
  if (!r || typeof r.id !== 'string' || r.store === false) return [];
  const items = Array.isArray(r.output) ? r.output : [];
  return [r.id, ...items.map((i: { id?: unknown } | null) => i?.id).filter((id): id is string => typeof id === 'string')];
}

/** `lasting`: no retry can change the answer (a queued job's run ends in the dead-letter queue at once). */
type Refusal = { status: number; error: OpenAiError; headers?: Record<string, string>; lasting?: boolean };

/**
 * What a request continues: refused, or the provider that keeps the state it continues (null: it
 * continues nothing this gateway answered), the only provider whose routes can serve it.
 */
export type Continuation = { refusal: Refusal } | { refusal: null; provider: string | null };

const NOTHING: Continuation = { refusal: null, provider: null };

/** The caller's text quoted in a message, no longer than this. */
const QUOTED = 100;

/** The refusal of a request continuing `ref`, whose provider no route in force serves any more. */
function providerGone(ref: Reference, provider: string): Refusal {
  const previous = ref.param === 'previous_response_id';
  const what = previous ? 'Previous response' : 'Item';
  const message =
    `${what} with id '${cutText(ref.id, QUOTED)}' was stored by provider "${provider}", which no route of the routing map ` +
    `serves any more: start a new conversation without ${previous ? 'previous_response_id' : 'it'}`;
  const code = previous ? 'previous_response_provider_gone' : 'item_provider_gone';
  return { status: 400, error: openAiError(message, 'invalid_request_error', ref.param, code), lasting: true };
}

/**
 * OpenAI's own answer for an id it does not know: another tenant's is not theirs to learn of. No
 * retry changes it (a queued job's run ends in the dead-letter queue at once).
 */
function notFound(ref: Reference): Refusal {
  const what = ref.param === 'previous_response_id' ? 'Previous response' : 'Item';
  const message = `${what} with id '${cutText(ref.id, QUOTED)}' not found.`;
  const code = ref.param === 'previous_response_id' ? 'previous_response_not_found' : 'item_not_found';
  return { status: 400, error: openAiError(message, 'invalid_request_error', ref.param, code), lasting: true };
}

export class ResponseOwnership {
  constructor(
    private readonly owners: ResponseOwners,
    private readonly warn: (message: string) => void,
    /** The routes in force (a reload changes them). */
    private readonly routes: () => readonly Route[],
  ) {}

  /**
   * A request with a client key continues only what its tenant owns. One without (a queued job's
   * run: its tenant was checked when queued) is told where the state it continues lives, and
   * refused when that is no longer known (the owner expired).
   */
  async check(ctx: RequestContext, waitMs: number): Promise<Continuation> {
    if (ctx.api !== 'responses') return NOTHING;
    const conversation = conversationOf(ctx.body);
    if (conversation !== null && ctx.clientKey) {
      // No tenant was answered one (the gateway serves no /v1/conversations): one on the provider
      // key is the operator's, or another program's, not the caller's to read or add to.
      const message = `Conversation with id '${cutText(conversation, QUOTED)}' not found.`;
      return { refusal: { status: 400, error: openAiError(message, 'invalid_request_error', 'conversation', 'conversation_not_found') } };
    }
    const refs = referencesOf(ctx.body);
    if (!refs.length) return NOTHING;
    let owners: Array<Owner | null>;
    try {
      owners = await within(this.owners.owners(refs.map((r) => r.id)), waitMs, 'the response owners');
    } catch {
      const message = 'cannot check who owns the response this request continues now; try again shortly';
      const error = openAiError(message, 'api_error', null, 'response_owner_unavailable');
      return { refusal: { status: 503, error, headers: { 'retry-after': '1' } } };
    }
    // A queued job's run was checked when queued: an owner missing now has expired, and with it the
    // only word on which provider keeps the state (any other would answer without it).
    const unknown = (i: number) => (ctx.clientKey ? owners[i]?.tenant !== ctx.customerId : owners[i] === null);
    const foreign = refs.find((_, i) => unknown(i));
    return foreign ? { refusal: notFound(foreign) } : this.keptBy(ctx, refs, owners);
  }

  /** The provider that keeps what the request continues, refused when no route in force can serve it there. */
  private keptBy(ctx: RequestContext, refs: Reference[], owners: Array<Owner | null>): Continuation {
    const i = owners.findIndex((o) => o !== null);
    const provider = owners[i]?.provider || null;
    // As a call is planned (call-plan.ts): the Responses API natively, or chat for a request that translates.
    const serves = (r: Route) =>
      r.config.provider === provider && (r.apis.has('responses') || (ctx.asChat !== undefined && r.apis.has('chat')));
    if (provider === null || this.routes().some(serves)) return { refusal: null, provider };
    return { refusal: providerGone(refs[i], provider) };
  }

  /**
   * Makes a native answer's ids the request's tenant's, kept by `provider` (the route's); a failure
   * is logged (a follow-up naming them is refused).
   */
  async claim(ctx: RequestContext, provider: string, response: unknown, waitMs: number): Promise<void> {
    const ids = idsOf(response);
    if (!ids.length) return;
    try {
      await within(this.owners.claim({ tenant: ctx.customerId, provider }, ids), waitMs, 'the response owners');
    } catch (error) {
      this.warn(
        `response ${ids[0].slice(0, QUOTED)}: its owner was not stored in time (${(error as Error).message}); a request continuing it is refused unless the store gets it`,
      );
    }
  }
}
