/**
 * `GET /v1/models`: the models the routing map serves, in OpenAI's list shape (tools probe it to
 * check a key). Only models the caller could use now: not a killed model, and with a client key
 * that names its models, only those (a model picker must not offer what answers 403).
 */
import type express from 'express';
import { openAiError } from './errors';
import { cutText } from '../../schema/cut-text';
import type { FlagStore } from './flags';
import { clientKeyOf } from './key-guard';
import { lastOf, type Route } from './route';

interface Model {
  id: string;
  object: 'model';
  created: number;
  owned_by: string;
}

export function mountModels(app: express.Express, routes: () => Route[], flags: FlagStore): void {
  const list = lastOf(routes, (served) => {
    const models = new Map<string, Model>();
    for (const r of served)
      if (!models.has(r.config.model))
        models.set(r.config.model, { id: r.config.model, object: 'model', created: 0, owned_by: r.config.provider });
    return models;
  });
  const usable = (res: express.Response) => {
    const killed = flags.get().killed_models;
    const allowed = clientKeyOf(res)?.models ?? [];
    return (id: string) => !killed.includes(id) && (!allowed.length || allowed.includes(id));
  };
  app.get('/v1/models', (_req, res) => {
    const ok = usable(res);
    res.json({ object: 'list', data: [...list().values()].filter((m) => ok(m.id)) });
  });
  // Every segment: ids such as `meta-llama/llama-3.1-8b-instruct` come with their slash as it is or encoded.
  // A trailing slash is not part of the id (every other path takes one too).
  app.get('/v1/models/*id', (req, res) => {
    const id = (req.params.id as unknown as string[]).join('/').replace(/\/$/, '');
    const model = list().get(id);
    if (model && usable(res)(model.id)) res.json(model);
    else
      res
        .status(404)
        .json(
          openAiError(
            `model: "${cutText(id, 200)}" is not served here, or not to this key`,
            'invalid_request_error',
            'model',
            'model_not_found',
          ),
        );
  });
}
