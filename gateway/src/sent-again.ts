/**
 * A command sent again. ioredis sends a command again on its new connection when the old one was
 * lost before the answer came back, so a command Redis had already run runs a second time. One that
 * takes something (a window, a claim, a mark) would then find it taken, by itself, and answer
 * "taken" to the caller that took it. Such a command carries a token new to each take, and its
 * script counts a thing holding that token as its own.
 */

/**
 * Lua: `take_or_own(key, token, ms)`: SET key token NX PX ms; true when it set the key, and when the
 * key already holds this token (this take, sent again).
 */
export const TAKE_OR_OWN = `
local function take_or_own(key, token, ms)
  return redis.call('SET', key, token, 'NX', 'PX', ms) or redis.call('GET', key) == token
end`;
