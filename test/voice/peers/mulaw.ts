// G.711 µ-law (ITU-T G.711, the North American companding Twilio streams at 8 kHz): an encoder and
// decoder written out, and the caller's "voice": a synthesized voiced signal (a glottal-like pulse
// train at a speaking pitch, shaped by two vowel formants, with a syllable envelope), so the audio
// on the wire is real µ-law speech-like sound, not arbitrary bytes.

const BIAS = 0x84;
const CLIP = 32635;

export function encodeSample(pcm: number): number {
  let s = Math.max(-32768, Math.min(32767, Math.round(pcm)));
  const sign = s < 0 ? 0x80 : 0;
  if (sign) s = -s;
  if (s > CLIP) s = CLIP;
  s += BIAS;
  let exponent = 7;
  for (let mask = 0x4000; (s & mask) === 0 && exponent > 0; mask >>= 1) exponent--;
  const mantissa = (s >> (exponent + 3)) & 0x0f;
  return ~(sign | (exponent << 4) | mantissa) & 0xff;
}

export function decodeSample(byte: number): number {
  const u = ~byte & 0xff;
  const sign = u & 0x80;
  const exponent = (u >> 4) & 0x07;
  const mantissa = u & 0x0f;
  const magnitude = (((mantissa << 3) + BIAS) << exponent) - BIAS;
  return sign ? -magnitude : magnitude;
}

export const RATE = 8000;
export const FRAME_BYTES = 160; // 20 ms

export function encode(pcm: Float64Array): Buffer {
  const out = Buffer.alloc(pcm.length);
  for (let i = 0; i < pcm.length; i++) out[i] = encodeSample(pcm[i]);
  return out;
}

/** µ-law silence: the code of sample 0. */
export function silence(ms: number): Buffer {
  return Buffer.alloc((ms * RATE) / 1000, encodeSample(0));
}

/** A voiced, vowel-like signal: pitch `f0` Hz, formants near 700 and 1200 Hz, syllables of ~200 ms. */
export function voiced(ms: number, f0 = 130, level = 9000): Buffer {
  const n = (ms * RATE) / 1000;
  const pcm = new Float64Array(n);
  const formants = [
    [700, 1.0],
    [1200, 0.6],
    [2500, 0.2],
  ];
  for (let i = 0; i < n; i++) {
    const t = i / RATE;
    const pitch = f0 * (1 + 0.03 * Math.sin(2 * Math.PI * 5 * t));
    let v = 0;
    for (let h = 1; h * pitch < 3400; h++) {
      const f = h * pitch;
      const gain = formants.reduce((g, [fc, a]) => g + a / (1 + ((f - fc) / 150) ** 2), 0) / h ** 0.5;
      v += gain * Math.sin(2 * Math.PI * f * t);
    }
    const syllable = 0.55 + 0.45 * Math.sin(2 * Math.PI * 2.5 * t - Math.PI / 2);
    const edge = Math.min(1, i / 80, (n - i) / 80);
    pcm[i] = v * syllable * edge;
  }
  const peak = pcm.reduce((m, x) => Math.max(m, Math.abs(x)), 0) || 1;
  for (let i = 0; i < n; i++) pcm[i] = (pcm[i] / peak) * level;
  return encode(pcm);
}

/** Mean absolute amplitude of µ-law bytes (a VAD's energy). */
export function energy(bytes: Buffer): number {
  let sum = 0;
  for (const b of bytes) sum += Math.abs(decodeSample(b));
  return bytes.length ? sum / bytes.length : 0;
}
