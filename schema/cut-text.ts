/**
 * Text cut to a length, for what the gateway and the meter shorten before sending it on or writing
 * it to a cell. JavaScript counts UTF-16 units: a plain slice can keep the first half of a surrogate
 * pair (an emoji, a rarer CJK character), which JSON carries as a lone `\ud83d` that strict parsers
 * (providers' APIs among them) refuse as invalid, UTF-8 turns into U+FFFD and a cell cannot show.
 */

/** At most `max` UTF-16 units of `text`, one fewer when the last would be half a pair. */
export function cutText(text: string, max: number): string {
  const last = text.charCodeAt(max - 1);
  return text.slice(0, last >= 0xd800 && last <= 0xdbff ? max - 1 : max);
}
