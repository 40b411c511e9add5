/**
 * Tenant isolation of stored responses (response-owners.ts keeps who owns what): which ids a
 * Responses request continues, the refusal when its tenant does not own one, and the ids a native
 * answer makes its tenant's. Only a client key proves a request's tenant, so this runs only with
 * GATEWAY_AUTH=keys (stack.ts): without keys nothing is checked or recorded.
 */
import { within } from '../within';
import { openAiError, type OpenAiError } from '../errors';
import type { RequestContext } from '../request-context';
import type { ResponseOwners } from '../response-owners';

/** An id a request continues, and the parameter that named it. */
interface Reference {
  id: string;
  param: string;
}

/**
 * An input item whose content the provider reads from its store by id: OpenAI's `item_reference`
 * (`type` may be left out), and a reasoning item without its `encrypted_content` (OpenAI fills it
 * in from the stored item; the stateless form, `store: false`, carries its own).
 */
const isReference = (item: Record<string, unknown>) =>
  item.type === 'item_reference' ||
  (item.type === 'reasoning' && item.encrypted_content == null) ||
  (item.type == null && typeof item.id === 'string' && !('role' in item) && !('content' in item));

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

export type Refusal = { status: number; error: OpenAiError; headers?: Record<string, string> };

/** The caller's text quoted in a message, no longer than this. */
const QUOTED = 100;

export class ResponseOwnership {
  constructor(
    private readonly owners: ResponseOwners,
    private readonly warn: (message: string) => void,
  ) {}

  /** Null when the request continues nothing, or only what its tenant owns; else what to answer. */
  async refusal(ctx: RequestContext, waitMs: number): Promise<Refusal | null> {
    if (ctx.api !== 'responses' || !ctx.clientKey) return null;
    const conversation = conversationOf(ctx.body);
    if (conversation !== null) {
      // No tenant was answered one (the gateway serves no /v1/conversations): one on the provider
      // key is the operator's, or another program's, not the caller's to read or add to.
      const message = `Conversation with id '${conversation.slice(0, QUOTED)}' not found.`;
      return { status: 400, error: openAiError(message, 'invalid_request_error', 'conversation', 'conversation_not_found') };
    }
    const refs = referencesOf(ctx.body);
    if (!refs.length) return null;
    let owners: Array<string | null>;
    try {
      owners = await within(this.owners.owners(refs.map((r) => r.id)), waitMs, 'the response owners');
    } catch {
      const message = 'cannot check who owns the response this request continues now; try again shortly';
      return { status: 503, error: openAiError(message, 'api_error', null, 'response_owner_unavailable'), headers: { 'retry-after': '1' } };
    }
    const foreign = refs.find((_, i) => owners[i] !== ctx.customerId);
    if (!foreign) return null;
    // OpenAI's own answer for an id it does not know: another tenant's is not theirs to learn of.
    const what = foreign.param === 'previous_response_id' ? 'Previous response' : 'Item';
    const message = `${what} with id '${foreign.id.slice(0, QUOTED)}' not found.`;
    const code = foreign.param === 'previous_response_id' ? 'previous_response_not_found' : 'item_not_found';
    return { status: 400, error: openAiError(message, 'invalid_request_error', foreign.param, code) };
  }

  /** Makes a native answer's ids the request's tenant's; a failure is logged (a follow-up naming them is refused). */
  async claim(ctx: RequestContext, response: unknown, waitMs: number): Promise<void> {
    const ids = idsOf(response);
    if (!ids.length) return;
    try {
      await within(this.owners.claim(ctx.customerId, ids), waitMs, 'the response owners');
    } catch (error) {
      this.warn(
        `response ${ids[0].slice(0, QUOTED)}: its owner was not stored (${(error as Error).message}); a request continuing it will be refused`,
      );
    }
  }
}
