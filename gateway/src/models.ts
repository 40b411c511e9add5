/** `GET /v1/models`: the models the routing map serves, in OpenAI's list shape (tools probe it to check a key). */
import type express from 'express';
import { openAiError } from './errors';
import { lastOf, type Route } from './route';

export function mountModels(app: express.Express, routes: () => Route[]): void {
  const list = lastOf(routes, (served) => {
    const models = new Map<string, { id: string; object: 'model'; created: number; owned_by: string }>();
    for (const r of served)
      if (!models.has(r.config.model))
        models.set(r.config.model, { id: r.config.model, object: 'model', created: 0, owned_by: r.config.provider });
    return models;
  });
  app.get('/v1/models', (_req, res) => {
    res.json({ object: 'list', data: [...list().values()] });
  });
  app.get('/v1/models/:id', (req, res) => {
    const model = list().get(req.params.id);
    if (model) res.json(model);
    else
      res
        .status(404)
        .json(openAiError(`model: no route serves "${req.params.id.slice(0, 200)}"`, 'invalid_request_error', 'model', 'model_not_found'));
  });
}
