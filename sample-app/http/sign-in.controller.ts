import { Body, Controller, Get, Post, Query, Res } from '@nestjs/common';
import type { ServerResponse } from 'node:http';
import type { DashboardRequest } from '../../lib/dashboard/index.js';

/** The cookie the sample's sign-in sets: who you said you are. */
export const ACTOR_COOKIE = 'actor';
const ACTOR = /^[\p{L}\p{N} ._@-]{1,200}$/u;

/**
 * Who asks, for the sample's dashboard guard: the `x-actor` header (scripts, curl), or the cookie
 * the sign-in form sets (a person in a browser). A development stand-in for real authentication:
 * anyone can claim any name. In your app, the guard asks your authentication (a session, a JWT)
 * and `actor` returns the signed-in user.
 */
export function sampleActor(req: DashboardRequest): string | undefined {
  const header = req.headers['x-actor'];
  const fromHeader = Array.isArray(header) ? header[0] : header;
  if (fromHeader !== undefined) return ACTOR.test(fromHeader) ? fromHeader : undefined;
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const [name, ...value] = part.trim().split('=');
    if (name !== ACTOR_COOKIE) continue;
    try {
      const actor = decodeURIComponent(value.join('='));
      return ACTOR.test(actor) ? actor : undefined;
    } catch {
      return undefined;
    }
  }
  return undefined;
}

/** Only paths of this app, so the form cannot send anyone elsewhere. */
function localPath(value: unknown): string {
  return typeof value === 'string' && /^\/(?![/\\])[\x21-\x7e]*$/.test(value) ? value : '/pg-queue';
}

const escape = (text: string) => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

@Controller('sign-in')
export class SignInController {
  @Get()
  form(@Query('returnTo') returnTo: unknown, @Res() res: ServerResponse): void {
    res.setHeader('Content-Type', 'text/html; charset=utf-8');
    res.setHeader('Content-Security-Policy', "default-src 'none'; form-action 'self'; style-src 'unsafe-inline'");
    res.end(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>Sign in · sample app</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:32rem;margin:2rem auto;padding:0 1rem}input,button{font:inherit;padding:6px 10px}label{display:block;font-weight:600}</style></head>
<body><main>
<h1>Sign in to the queue dashboard</h1>
<p><strong>A development stand-in for real authentication:</strong> the sample believes any name you give. Your application's guard checks real credentials.</p>
<form method="post" action="/sign-in">
<input type="hidden" name="returnTo" value="${escape(localPath(returnTo))}">
<p><label for="actor">Your name (recorded with every action you take)</label><input id="actor" name="actor" required maxlength="200" pattern="[\\p{L}\\p{N} ._@\\-]{1,200}" autocomplete="username"></p>
<p><button type="submit">Sign in</button></p>
</form>
</main></body></html>`);
  }

  @Post()
  signIn(@Body() body: { actor?: unknown; returnTo?: unknown } | undefined, @Res() res: ServerResponse): void {
    const actor = typeof body?.actor === 'string' ? body.actor.trim() : '';
    if (!ACTOR.test(actor)) {
      res.statusCode = 303;
      res.setHeader('Location', '/sign-in');
      res.end();
      return;
    }
    res.statusCode = 303;
    res.setHeader('Set-Cookie', `${ACTOR_COOKIE}=${encodeURIComponent(actor)}; Path=/; HttpOnly; SameSite=Lax`);
    res.setHeader('Location', localPath(body?.returnTo));
    res.end();
  }
}
