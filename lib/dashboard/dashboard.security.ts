import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { DashboardRequest } from './dashboard.options.js';

/**
 * The dashboard's defences beside the guard: a strict Content-Security-Policy (only the module's
 * own script and stylesheet run; no inline script, style or eval; no request leaves the origin),
 * and two checks on every action: the request comes from this origin (Origin, or Sec-Fetch-Site)
 * and carries the form token of a double-submit cookie, which a page of another site can neither
 * read nor set.
 */

export const CSRF_COOKIE = 'pgq_csrf';
export const CSRF_FIELD = '_csrf';

export const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "form-action 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
].join('; ');

export function setSecurityHeaders(res: ServerResponse): void {
  res.setHeader('Content-Security-Policy', CONTENT_SECURITY_POLICY);
  res.setHeader('X-Content-Type-Options', 'nosniff');
  res.setHeader('X-Frame-Options', 'DENY');
  res.setHeader('Referrer-Policy', 'same-origin');
  res.setHeader('Cross-Origin-Opener-Policy', 'same-origin');
  res.setHeader('Cross-Origin-Resource-Policy', 'same-origin');
  // Pages hold live state and what an operator may see: never from a cache.
  res.setHeader('Cache-Control', 'no-store');
}

/** The request's cookies (Express parses none without cookie-parser). */
export function cookies(req: DashboardRequest): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const at = part.indexOf('=');
    if (at < 0) continue;
    const name = part.slice(0, at).trim();
    try {
      out[name] = decodeURIComponent(part.slice(at + 1).trim());
    } catch {
      // a cookie that is not ours, badly encoded: ignored
    }
  }
  return out;
}

const TOKEN = /^[A-Za-z0-9_-]{43}$/;

/** The form token of this browser: its cookie's value, or a new one set now (HttpOnly, SameSite=Strict). */
export function formToken(req: DashboardRequest, res: ServerResponse): string {
  const existing = cookies(req)[CSRF_COOKIE];
  if (existing && TOKEN.test(existing)) return existing;
  const token = randomBytes(32).toString('base64url');
  const secure = (req.socket as { encrypted?: boolean }).encrypted === true || req.headers['x-forwarded-proto'] === 'https';
  res.appendHeader('Set-Cookie', `${CSRF_COOKIE}=${token}; Path=/; HttpOnly; SameSite=Strict${secure ? '; Secure' : ''}`);
  return token;
}

/** The host the browser addressed (a proxy's X-Forwarded-Host first). */
function requestHost(req: DashboardRequest): string | undefined {
  const forwarded = req.headers['x-forwarded-host'];
  const host = (Array.isArray(forwarded) ? forwarded[0] : forwarded)?.split(',')[0]?.trim() ?? req.headers.host;
  return host?.toLowerCase();
}

/**
 * Whether an action may proceed: from this origin, and with the cookie's token in the form. A
 * browser sends Origin with every POST; Sec-Fetch-Site covers one that does not. A client with
 * neither (curl) still needs the token.
 */
export function sameOriginAction(req: DashboardRequest, body: Record<string, unknown>): boolean {
  const origin = req.headers.origin;
  if (origin !== undefined) {
    let host: string;
    try {
      host = new URL(origin).host.toLowerCase();
    } catch {
      return false;
    }
    if (origin === 'null' || host !== requestHost(req)) return false;
  }
  const site = req.headers['sec-fetch-site'];
  if (site !== undefined && site !== 'same-origin') return false;
  const sent = body[CSRF_FIELD];
  const expected = cookies(req)[CSRF_COOKIE];
  if (typeof sent !== 'string' || !expected || !TOKEN.test(expected) || sent.length !== expected.length) return false;
  return timingSafeEqual(Buffer.from(sent), Buffer.from(expected));
}
