/**
 * What to send to one route for one request: which of the provider's APIs to call and with what
 * body. A route serves a request natively when it offers the request's API; a Responses request
 * reaches a chat-only route translated (responses/); an embeddings request goes only to routes
 * that serve embeddings of the very model asked for (another model's vectors are useless to the
 * caller's index). Bodies are made once per request and API, not once per attempt.
 *
 * A translated request names its output limit `max_completion_tokens` (OpenAI's name, the only one
 * its reasoning models take) on a route of kind `openai`, and `max_tokens` on any other kind: the
 * name every OpenAI-compatible chat provider knows, where some refuse the newer one.
 */
import type { RequestContext, ApiKind } from './request-context';
import type { Route } from './route';

export interface CallPlan {
  /** The provider API called: the request's own, or `chat` for a translated Responses request. */
  api: ApiKind;
  body: Record<string, unknown>;
}

/** A request's bodies per provider API, made on first use. */
export class CallPlanner {
  /** By API, and for a translated request by the name of its output limit too. */
  private readonly bodies = new Map<string, Record<string, unknown> | null>();
  constructor(private readonly ctx: RequestContext) {}

  /**
   * The call to make on this route with `model` (the route's own, or another that a scope's fallback
   * or spend-cap routing asks for), or null when the route cannot serve this request.
   */
  planFor(route: Route, model = route.config.model): CallPlan | null {
    const { ctx } = this;
    if (ctx.api === 'embeddings') {
      return route.apis.has('embeddings') && model === ctx.body.model ? this.plan('embeddings') : null;
    }
    if (route.apis.has(ctx.api)) return this.plan(ctx.api);
    if (ctx.api === 'responses' && route.apis.has('chat') && ctx.asChat) return this.plan('chat', route.config.provider !== 'openai');
    return null;
  }

  private plan(api: ApiKind, maxTokens = false): CallPlan | null {
    const key = maxTokens ? `${api}:max_tokens` : api;
    if (!this.bodies.has(key)) this.bodies.set(key, this.bodyFor(api, maxTokens));
    const body = this.bodies.get(key)!;
    return body ? { api, body } : null;
  }

  private bodyFor(api: ApiKind, maxTokens: boolean): Record<string, unknown> | null {
    const { ctx } = this;
    const translated = api === 'chat' && ctx.api === 'responses';
    const body: Record<string, unknown> = translated ? { ...ctx.asChat! } : { ...ctx.body };
    if (translated) {
      if (maxTokens && 'max_completion_tokens' in body) {
        body.max_tokens = body.max_completion_tokens;
        delete body.max_completion_tokens;
      }
      // This call's `stream` decides, not the client's: the Cold worker runs a streamed request whole.
      delete body.stream;
      delete body.stream_options;
      if (ctx.stream) body.stream = true;
    }
    // A chat stream asks the provider for its usage chunk (hidden from clients that did not ask, see sse.ts).
    if (api === 'chat' && ctx.stream) body.stream_options = { ...((body.stream_options as object | undefined) ?? {}), include_usage: true };
    return body;
  }
}
