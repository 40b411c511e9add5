/**
 * Objects stored on the operator's provider account that a request can name by id: a stored prompt
 * (`prompt`), files (content parts given by `file_id`, the image generation tool's mask, a code
 * interpreter's or a shell's `file_ids`), vector stores (`file_search`), containers
 * (`code_interpreter`, the shell tool's `container_reference`), skills (a shell container's
 * `skill_reference`), a chat message's previous audio answer (`audio.id`) and the custom voice a chat
 * answer is spoken in (`audio.voice.id`: a likeness of a voice actor, made with their consent).
 * Every tenant's request reaches the provider with the operator's one key, and the gateway creates
 * none of these for a tenant (it serves no /v1/files, /v1/vector_stores, /v1/containers, /v1/skills,
 * nor prompts), so one named in a request is the operator's or another program's: with client keys
 * it is refused before anything is called or queued (endpoint.ts), unless the routing map lists it in
 * `shared_objects` (the operator's word that any tenant may use it). Conversations are refused with the
 * stored responses (responses/ownership.ts).
 */
import { cutText } from '../../schema/cut-text';
import { openAiError, type OpenAiError } from './errors';
import { isObject } from './json-object';
import type { RequestContext } from './request-context';

type Kind = 'prompt' | 'file' | 'vector_store' | 'container' | 'skill' | 'audio' | 'voice';

/** An object a request names, and the parameter that names it. */
interface Named {
  kind: Kind;
  id: string;
  param: string;
}

/** How each kind is named in a message: alone, and as what the gateway keeps none of. */
const WORDS: Record<Kind, [one: string, many: string]> = {
  prompt: ['Prompt', 'prompts'],
  file: ['File', 'files'],
  vector_store: ['Vector store', 'vector stores'],
  container: ['Container', 'containers'],
  skill: ['Skill', 'skills'],
  audio: ['Audio response', 'audio responses'],
  voice: ['Voice', 'custom voices'],
};

/** Responses' content parts the model reads from a stored file when given its `file_id`. */
const FILE_PARTS = new Set(['input_file', 'input_image', 'computer_screenshot']);

/** The caller's text quoted in a message, no longer than this. */
const QUOTED = 100;

/** A content part's stored file, and where in the part it is named: Responses' parts, and chat's `file` part. */
function fileOf(part: Record<string, unknown>): [id: unknown, at: string] | null {
  if (FILE_PARTS.has(part.type as string)) return [part.file_id, '.file_id'];
  if (part.type === 'file' && isObject(part.file)) return [part.file.file_id, '.file.file_id'];
  return null;
}

/**
 * The stored files the content parts under `value` (at `path`) name, at any depth: message
 * content, tool outputs, a prompt's variables; and what tools given there read (an input item's
 * `tools`: `additional_tools`, `tool_search_output`). Bodies nest 128 levels at most (http-io.ts).
 * Annotations that cite a file (`file_citation`) are not read by the model and are not counted.
 */
function filesIn(value: unknown, path: string, found: Named[]): void {
  if (Array.isArray(value)) value.forEach((v, i) => filesIn(v, `${path}[${i}]`, found));
  if (!isObject(value)) return;
  const file = fileOf(value);
  if (file && typeof file[0] === 'string') found.push({ kind: 'file', id: file[0], param: path + file[1] });
  toolObjects(value.tools, `${path}.tools`, found);
  for (const key in value) if (typeof value[key] === 'object') filesIn(value[key], `${path}.${key}`, found);
}

/** Each string of `ids` (an array, else nothing) as a `kind`, at `path[k]`. */
function eachId(kind: Kind, ids: unknown, path: string, found: Named[]): void {
  if (Array.isArray(ids)) ids.forEach((id, k) => typeof id === 'string' && found.push({ kind, id, param: `${path}[${k}]` }));
}

/**
 * What a container at `at` is given from the store: the container itself by id (the shell's
 * `container_reference`), or the files and skills a new one starts with. Read whatever its `type`
 * says: the provider goes by the fields too.
 */
function containerObjects(container: Record<string, unknown>, at: string, found: Named[]): void {
  const id = container.container_id;
  if (typeof id === 'string') found.push({ kind: 'container', id, param: `${at}.container_id` });
  eachId('file', container.file_ids, `${at}.file_ids`, found);
  const skills = Array.isArray(container.skills) ? container.skills : [];
  skills.forEach((skill: unknown, k) => {
    if (isObject(skill) && typeof skill.skill_id === 'string')
      found.push({ kind: 'skill', id: skill.skill_id, param: `${at}.skills[${k}].skill_id` });
  });
}

/** What the tools read from the store: vector stores, a container (`{type: "auto"}` makes a new one), files, skills. */
function toolObjects(tools: unknown, path: string, found: Named[]): void {
  if (!Array.isArray(tools)) return;
  tools.forEach((tool, i) => {
    if (!isObject(tool)) return;
    const at = `${path}[${i}]`;
    eachId('vector_store', tool.vector_store_ids, `${at}.vector_store_ids`, found);
    const container = tool.container;
    if (typeof container === 'string') found.push({ kind: 'container', id: container, param: `${at}.container` });
    else if (isObject(container)) containerObjects(container, `${at}.container`, found);
    if (isObject(tool.environment)) containerObjects(tool.environment, `${at}.environment`, found);
    const mask = tool.input_image_mask;
    if (isObject(mask) && typeof mask.file_id === 'string')
      found.push({ kind: 'file', id: mask.file_id, param: `${at}.input_image_mask.file_id` });
  });
}

/** A stored prompt (`{id}`, or an id alone) and the files its variables name. */
function promptObjects(prompt: unknown, found: Named[]): void {
  if (typeof prompt === 'string') found.push({ kind: 'prompt', id: prompt, param: 'prompt' });
  if (!isObject(prompt)) return;
  if (typeof prompt.id === 'string') found.push({ kind: 'prompt', id: prompt.id, param: 'prompt.id' });
  filesIn(prompt.variables, 'prompt.variables', found);
}

/**
 * A previous audio answer a chat message names by id (`audio: {id}`): the provider reads it from its
 * store, and the gateway does not record which tenant it answered one to, so none is the caller's.
 */
function audioObjects(messages: unknown, found: Named[]): void {
  if (!Array.isArray(messages)) return;
  messages.forEach((message: unknown, i) => {
    const audio = isObject(message) ? message.audio : null;
    if (isObject(audio) && typeof audio.id === 'string') found.push({ kind: 'audio', id: audio.id, param: `messages[${i}].audio.id` });
  });
}

/** The custom voice a chat answer is to be spoken in, given by id (a built-in one is given by name). */
function voiceObjects(audio: unknown, found: Named[]): void {
  const voice = isObject(audio) ? audio.voice : null;
  if (isObject(voice) && typeof voice.id === 'string') found.push({ kind: 'voice', id: voice.id, param: 'audio.voice.id' });
}

/** Every stored object a chat or Responses request names, in the order of its parameters. */
function objectsOf(ctx: RequestContext): Named[] {
  const found: Named[] = [];
  const body = ctx.body as Record<string, unknown>;
  if (ctx.api === 'chat') {
    filesIn(body.messages, 'messages', found);
    audioObjects(body.messages, found);
    voiceObjects(body.audio, found);
  }
  if (ctx.api !== 'responses') return found;
  promptObjects(body.prompt, found);
  filesIn(body.input, 'input', found);
  toolObjects(body.tools, 'tools', found);
  return found;
}

/** The refusal of a request (with a client key) naming a stored object no tenant owns, `shared` aside; null when it names none. */
export function storedObjectRefusal(ctx: RequestContext, shared: ReadonlySet<string>): OpenAiError | null {
  const named = objectsOf(ctx).find((o) => !shared.has(o.id));
  if (!named) return null;
  const [one, many] = WORDS[named.kind];
  const message =
    `${one} with id '${cutText(named.id, QUOTED)}' not found: this gateway keeps no ${many} for its clients, ` +
    `and one stored on its provider account is not theirs to use.`;
  return openAiError(message, 'invalid_request_error', named.param, `${named.kind}_not_found`);
}
