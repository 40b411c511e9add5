/**
 * What the phone bridge needs from the environment: where Twilio reaches us (`PUBLIC_URL`, whose
 * `wss://` form is the media stream's URL and the URL signatures are computed over), the realtime
 * model's key and URL, and Twilio's credentials for signatures and call control. Secrets stay in
 * this object: nothing here is ever logged or answered.
 */

export interface PhoneSettings {
  /** The origin Twilio reaches, without a trailing slash, e.g. https://voice.example.com */
  publicUrl: string;
  /** PUBLIC_URL's WebSocket form (https → wss, http → ws). */
  mediaUrl: string;
  openaiApiKey: string;
  /** The realtime WebSocket URL with `?model=` set. */
  realtimeUrl: string;
  twilioAccountSid: string;
  twilioAuthToken: string;
  twilioApiUrl: string;
}

const DEFAULT_REALTIME_URL = 'wss://api.openai.com/v1/realtime';
const DEFAULT_TWILIO_API_URL = 'https://api.twilio.com';

function parsedUrl(value: string, protocols: string[]): URL | null {
  try {
    const u = new URL(value);
    return protocols.includes(u.protocol) ? u : null;
  } catch {
    return null;
  }
}

/**
 * Reads the settings; `problems` names each missing or malformed variable (never its value).
 * `model` is the configuration's `meta.model`, added to the realtime URL as `?model=`.
 */
export function phoneSettings(
  env: NodeJS.ProcessEnv,
  model: string,
): { settings: PhoneSettings; problems: [] } | { settings: null; problems: string[] } {
  const problems: string[] = [];
  for (const name of ['PUBLIC_URL', 'OPENAI_API_KEY', 'TWILIO_ACCOUNT_SID', 'TWILIO_AUTH_TOKEN']) {
    if (!env[name]) problems.push(`${name} is not set`);
  }
  // A secret file's last newline: the token went into every signature check (each call refused as not Twilio's).
  for (const name of ['OPENAI_API_KEY', 'TWILIO_AUTH_TOKEN']) {
    const value = env[name];
    if (value && value !== value.trim())
      problems.push(`${name}: expected no spaces or line breaks around it (a secret file's last newline?)`);
  }
  const pub = env.PUBLIC_URL ? parsedUrl(env.PUBLIC_URL, ['https:', 'http:']) : null;
  if (env.PUBLIC_URL && (!pub || (pub.pathname !== '/' && pub.pathname !== '') || pub.search)) {
    problems.push('PUBLIC_URL: expected the origin Twilio reaches, such as https://voice.example.com (no path)');
  }
  const realtime = parsedUrl(env.OPENAI_REALTIME_URL || DEFAULT_REALTIME_URL, ['wss:', 'ws:']);
  if (!realtime) problems.push('OPENAI_REALTIME_URL: expected a wss:// URL');
  const twilioApi = parsedUrl(env.TWILIO_API_URL || DEFAULT_TWILIO_API_URL, ['https:', 'http:']);
  if (!twilioApi) problems.push('TWILIO_API_URL: expected an https:// URL');
  if (env.TWILIO_ACCOUNT_SID && !/^[A-Za-z0-9]{1,64}$/.test(env.TWILIO_ACCOUNT_SID)) {
    problems.push('TWILIO_ACCOUNT_SID: expected letters and digits, such as AC0123…');
  }
  if (problems.length || !pub || !realtime || !twilioApi) return { settings: null, problems };
  if (!realtime.searchParams.has('model')) realtime.searchParams.set('model', model);
  const origin = pub.origin;
  return {
    settings: {
      publicUrl: origin,
      mediaUrl: `${origin.replace(/^http/, 'ws')}/twilio/media`,
      openaiApiKey: env.OPENAI_API_KEY!,
      realtimeUrl: realtime.toString(),
      twilioAccountSid: env.TWILIO_ACCOUNT_SID!,
      twilioAuthToken: env.TWILIO_AUTH_TOKEN!,
      twilioApiUrl: twilioApi.origin + twilioApi.pathname.replace(/\/$/, ''),
    },
    problems: [],
  };
}
