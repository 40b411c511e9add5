/**
 * A caller transcript's confidence from the transcription's log-probabilities (the session asks
 * for them with `include: ["item.input_audio_transcription.logprobs"]`): exp(mean logprob), the
 * geometric mean of the tokens' probabilities, between 0 and 1. One badly heard word in a short
 * answer pulls it down, a long clear sentence keeps it high. No log-probabilities (a
 * transcription model that does not report them): null, and the guard's confidence rules do not
 * see that transcript (the caller is not escalated on a figure nobody measured).
 */

interface LogProb {
  logprob: number;
}

export function transcriptConfidence(logprobs: unknown): number | null {
  if (!Array.isArray(logprobs) || logprobs.length === 0) return null;
  let sum = 0;
  for (const lp of logprobs as LogProb[]) {
    if (!lp || typeof lp.logprob !== 'number' || !Number.isFinite(lp.logprob)) return null;
    sum += Math.min(0, lp.logprob);
  }
  return Number(Math.exp(sum / logprobs.length).toFixed(4));
}
