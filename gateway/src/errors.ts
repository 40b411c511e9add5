/** Errors in OpenAI's shape, so OpenAI clients show them as they show OpenAI's own. */
export interface OpenAiError {
  error: { message: string; type: string; param: string | null; code: string | null };
}

export function openAiError(
  message: string,
  type = 'invalid_request_error',
  param: string | null = null,
  code: string | null = null,
): OpenAiError {
  return { error: { message, type, param, code } };
}

/** A start-up configuration problem: names the file, the path in it and what was expected. */
export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}
