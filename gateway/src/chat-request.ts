/**
 * The inbound request: OpenAI's chat-completions body (checked, other fields passed through
 * untouched) and the routing context from our headers.
 */
import { hash } from 'node:crypto';
import { z } from 'zod';
import { DEFAULT_TIME_TO_ANSWER_MS, type Scopes } from './scopes';

const Message = z.looseObject({
  role: z.enum(['system', 'developer', 'user', 'assistant', 'tool', 'function']),
  content: z.union([z.string(), z.array(z.unknown()), z.null()]).optional(),
});

const ChatBody = z.looseObject({
  model: z.string().min(1),
  messages: z.array(Message).min(1),
  stream: z.boolean().optional(),
  stream_options: z.looseObject({ include_usage: z.boolean().optional() }).nullish(),
});
export type ChatBodyT = z.infer<typeof ChatBody>;

/** Headers are case-insensitive; node:http gives them lowercased. */
type Headers = Record<string, string | string[] | undefined>;
const header = (h: Headers, name: string): string | undefined => {
  const v = h[name];
  return Array.isArray(v) ? v[0] : v;
};

export interface ChatContext {
  body: ChatBodyT;
  stream: boolean;
  idempotencyKey: string;
  userId: string;
  jobId: string;
  customerId: string;
  jobType: string;
  timeToAnswerMs: number;
  mustHaveAnswer: boolean;
  canUseCheaper: boolean;
}

/** Document 1: a hash of user id + job id + input, the same on every retry and every tier. */
export function idempotencyKeyFor(userId: string, jobId: string, messages: unknown): string {
  return hash('sha256', JSON.stringify([userId, jobId, messages]), 'hex');
}

export type ParseResult = { ok: true; context: ChatContext } | { ok: false; message: string; param: string | null };

const MAX_TIME_TO_ANSWER_MS = 600_000;

export function parseChatRequest(body: unknown, headers: Headers, scopes: Scopes): ParseResult {
  const parsed = ChatBody.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const param = issue.path.length ? issue.path.map(String).join('.') : null;
    return { ok: false, message: `${param ?? 'body'}: ${issue.message}`, param };
  }
  let tta = DEFAULT_TIME_TO_ANSWER_MS;
  const jobType = header(headers, 'x-job-type') ?? '';
  if (jobType && scopes[jobType]) tta = scopes[jobType].time_to_answer_ms;
  const explicit = header(headers, 'x-time-to-answer-ms');
  if (explicit !== undefined) {
    const n = Number(explicit);
    if (!Number.isInteger(n) || n < 1 || n > MAX_TIME_TO_ANSWER_MS) {
      return {
        ok: false,
        message: `x-time-to-answer-ms: expected whole milliseconds from 1 to ${MAX_TIME_TO_ANSWER_MS}, got "${explicit}"`,
        param: null,
      };
    }
    tta = n;
  }
  const userId = header(headers, 'x-user-id') ?? '';
  const jobId = header(headers, 'x-job-id') ?? '';
  const bool = (name: string, fallback: boolean) => {
    const v = header(headers, name);
    return v === undefined ? fallback : !/^(false|0|no)$/i.test(v.trim());
  };
  return {
    ok: true,
    context: {
      body: parsed.data,
      stream: parsed.data.stream === true,
      idempotencyKey: header(headers, 'idempotency-key') || idempotencyKeyFor(userId, jobId, parsed.data.messages),
      userId,
      jobId,
      customerId: header(headers, 'x-customer-id') ?? '',
      jobType,
      timeToAnswerMs: tta,
      mustHaveAnswer: bool('x-must-have-answer', true),
      canUseCheaper: bool('x-can-use-cheaper', false),
    },
  };
}
