/** An error's message, whatever realm it came from (a plain `instanceof Error` misses some). */
export const errorText = (error: unknown): string => String((error as { message?: unknown } | null)?.message ?? error);
