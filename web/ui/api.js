// api.js: the client of threadbox's HTTP API: the session, JSON calls,
// uploads with progress, downloads and the chat turn's event stream.
// The session is an access token in memory, renewed through an HttpOnly
// refresh cookie (docs/frontend.md, "Sessions").

export const APP = '/api/v1/app';

/**
 * ApiError is a failed call: HTTP status, error type and message;
 * sessionEnded is true when the call was refused because the session it
 * was made in is over (a 401 the renewal could not mend), which the
 * sign-in form, drawn by then, already says.
 */
export class ApiError extends Error {
  constructor(status, type, message, sessionEnded = false) {
    super(message);
    this.status = status;
    this.type = type;
    this.sessionEnded = sessionEnded;
  }
}

/** The names the org policy gives its switches, as users read them. */
const FEATURES = {
  'codeExecution': 'code execution',
  'uploads': 'file uploads',
  'downloads.generated': 'downloads of generated files',
  'downloads.uploaded': 'downloads of uploaded files',
  'egress': 'outbound network (egress)',
};

/** featureLabel returns the readable name of a policy feature. */
export function featureLabel(name) {
  return FEATURES[name] || name;
}

/**
 * explain turns an error into the sentence shown to the user. A policy
 * refusal names the feature the org admin switched off. A call refused
 * because the session ended gets no sentence (an empty one, which notify
 * does not show): the sign-in form says it clearly, and the server's own
 * words would only repeat it less so beside that form.
 */
export function explain(err) {
  if (!(err instanceof ApiError)) {
    // fetch rejects with a TypeError when no answer came at all.
    if (err instanceof TypeError && /fetch|network/i.test(err.message)) return 'The server could not be reached. Check the connection and try again.';
    return sentence((err && err.message) || String(err));
  }
  if (err.sessionEnded) return '';
  const m = /feature "([^"]+)" is disabled/.exec(err.message);
  if (m && (err.status === 403 || err.type === 'permission_error')) {
    return `Refused: your organization's admin has switched off ${featureLabel(m[1])} (${m[1]}).`;
  }
  return sentence(err.message);
}

/**
 * sentence returns a message as a sentence: the server words its errors
 * as Go does ("thread not found"), lower case and without a full stop.
 * A first word of plain lower-case letters is capitalised (not a name
 * such as "pgpt.tools" or "x-api-key"), and a full stop is added unless
 * the message ends with one, a question or an exclamation mark.
 */
export function sentence(message) {
  let s = String(message ?? '').trim();
  if (!s) return '';
  if (/^[a-z]+(\s|$)/.test(s)) s = s[0].toUpperCase() + s.slice(1);
  return /[.!?…]$/.test(s) ? s : s + '.';
}

let expiredHandler = () => {};
let expiryTimer = 0;
let renewTimer = 0;
let current = null; // {token, id, expires_at, session_expires_at}: memory only
let renewing = null; // the refresh under way, shared by every caller

/** The header the refresh endpoint requires (docs/frontend.md, "Sessions"). */
const REFRESH = { 'X-Threadbox-Refresh': '1' };
const REFRESH_URL = APP + '/auth/refresh';

/** onSessionExpired sets what happens when the session ends by itself. */
export function onSessionExpired(fn) { expiredHandler = fn; }

/**
 * session is the signed-in browser session. Its access token lives in this
 * page's memory only; the refresh token is an HttpOnly cookie the page
 * never sees, sent by the browser to the refresh endpoint alone. A reload
 * or a new tab gets a new access token from it (restore).
 */
export const session = {
  get() { return current; },
  save(s) {
    current = s;
    this.watch();
  },
  clear() {
    current = null;
    clearTimeout(expiryTimer);
    clearTimeout(renewTimer);
  },
  /**
   * watch ends the session when the refresh cookie's expiry passes and
   * renews the access token a minute before it expires.
   */
  watch() {
    clearTimeout(expiryTimer);
    clearTimeout(renewTimer);
    const s = current;
    if (!s) return;
    const end = new Date(s.session_expires_at || s.expires_at).getTime() - Date.now();
    if (end <= 0) { expire(); return; }
    expiryTimer = setTimeout(() => expire(), Math.min(end, 2 ** 31 - 1));
    const renewIn = new Date(s.expires_at).getTime() - Date.now() - 60e3;
    if (s.session_expires_at && new Date(s.expires_at) < new Date(s.session_expires_at)) {
      renewTimer = setTimeout(() => { renew(); }, Math.max(renewIn, 5e3));
    }
  },
};

function expire(message) {
  if (!current) return;
  session.clear();
  expiredHandler(message || 'Your session has expired. Please sign in again.');
}

/**
 * refresh asks the refresh endpoint for a new access token with the
 * browser's refresh cookie; resolves to the session, or null when there
 * is none (204: no cookie, never signed in or signed out; 401: signed out
 * in another tab, revoked, expired).
 */
async function refresh() {
  const resp = await fetch(REFRESH_URL, { method: 'POST', headers: REFRESH, credentials: 'same-origin', cache: 'no-store' });
  if (resp.status === 204 || resp.status === 401) return null;
  if (!resp.ok) throw await failure(resp, false);
  return resp.json();
}

/** restore signs the page in from the refresh cookie, if it has one. */
export async function restore() {
  const s = await refresh();
  if (s) session.save(s);
  return s;
}

/**
 * renew gets a new access token for the current session; resolves to
 * true when it did, and ends the session (false) when the server refused.
 * Concurrent callers share one request.
 */
export function renew() {
  if (!renewing) {
    renewing = (async () => {
      try {
        const s = await refresh();
        if (!s) {
          expire('Your session has expired or was revoked. Please sign in again.');
          return false;
        }
        if (!current) return false;
        if (s.id !== current.id) {
          // Another tab signed out and in again, maybe as someone else:
          // this page starts again with that sign-in.
          location.reload();
          return false;
        }
        session.save(s);
        return true;
      } catch {
        return false; // offline: keep the session, the call fails as it is
      } finally {
        renewing = null;
      }
    })();
  }
  return renewing;
}

function authHeaders(extra = {}) {
  const s = session.get();
  return s ? { Authorization: 'Bearer ' + s.token, ...extra } : extra;
}

/**
 * authFetch is fetch with the access token; a 401 renews it once through
 * the refresh cookie and sends the request again, so an expired access
 * token never shows, while a revoked session (a sign-out in another tab)
 * ends this one at its next request.
 */
async function authFetch(url, init = {}) {
  const send = () => fetch(url, { ...init, headers: authHeaders(init.headers || {}) });
  let resp = await send();
  if (resp.status === 401 && current && await renew()) resp = await send();
  return resp;
}

async function failure(resp, ends = true) {
  let type = 'api_error';
  let message = `${resp.status} ${resp.statusText}`;
  try {
    const body = await resp.json();
    if (body && body.error) { type = body.error.type; message = body.error.message; }
  } catch { /* not JSON */ }
  if (ends && resp.status === 401) {
    expire('Your session has expired or was revoked. Please sign in again.');
    return new ApiError(resp.status, type, message, true);
  }
  return new ApiError(resp.status, type, message);
}

/** api calls a JSON endpoint; path is absolute or relative to /api/v1/app. */
export async function api(method, path, body) {
  const url = path.startsWith('/api/') ? path : APP + path;
  const init = { method, headers: {} };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const resp = await authFetch(url, init);
  if (!resp.ok) throw await failure(resp);
  if (resp.status === 204) return null;
  return resp.json();
}

/**
 * login exchanges a password for a browser session: the server sets the
 * refresh cookie and answers with the first access token.
 */
export async function login(email, password) {
  const resp = await fetch(APP + '/auth/login', {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ email, password, refresh_cookie: true }),
  });
  // A 401 here is a wrong email or password, not a session that ended.
  if (!resp.ok) throw await failure(resp, false);
  const s = await resp.json();
  session.save(s);
  return s;
}

/**
 * logout revokes the session on the server (its refresh token and every
 * access token of it, in every tab) and deletes the cookie, then forgets
 * the access token.
 */
export async function logout() {
  try {
    await fetch(REFRESH_URL, { method: 'DELETE', headers: REFRESH, credentials: 'same-origin' });
  } catch { /* offline */ }
  session.clear();
}

/** fetchBlob downloads url with the session's token. */
export async function fetchBlob(url) {
  const resp = await authFetch(url);
  if (!resp.ok) throw await failure(resp);
  return resp.blob();
}

/**
 * fetchText downloads url as text with the session's token; with maxBytes,
 * only that many first bytes (a Range request), for a preview.
 */
export async function fetchText(url, maxBytes = 0) {
  const resp = await authFetch(url, maxBytes > 0 ? { headers: { Range: `bytes=0-${maxBytes - 1}` } } : {});
  if (!resp.ok) throw await failure(resp);
  return resp.text();
}

/**
 * fetchRange downloads bytes from…to (inclusive) of url with the session's
 * token (a Range request); resolves to {bytes, total}: the bytes (none past
 * the end) and the file's size (null when the answer does not say).
 */
export async function fetchRange(url, from, to) {
  const resp = await authFetch(url, { headers: { Range: `bytes=${from}-${to}` } });
  if (resp.status === 416) return { bytes: new Uint8Array(0), total: from };
  if (!resp.ok) throw await failure(resp);
  const all = new Uint8Array(await resp.arrayBuffer());
  if (resp.status === 200) return { bytes: all.subarray(from, to + 1), total: all.length }; // the whole file came
  const m = /\/(\d+)$/.exec(resp.headers.get('Content-Range') || '');
  return { bytes: all, total: m ? Number(m[1]) : null };
}

/**
 * upload posts file as multipart field "file" to url, under name (the
 * file's own name when not given), calling onProgress(loaded, total) as
 * bytes leave; resolves to the JSON answer.
 */
export async function upload(url, file, onProgress, name = file.name) {
  // An upload is not sent twice: the access token is renewed first when it
  // is about to expire.
  const s = session.get();
  if (s && new Date(s.expires_at).getTime() - Date.now() < 90e3) await renew();
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open('POST', url);
    const s = session.get();
    if (s) xhr.setRequestHeader('Authorization', 'Bearer ' + s.token);
    xhr.upload.addEventListener('progress', (e) => { if (e.lengthComputable) onProgress(e.loaded, e.total); });
    xhr.addEventListener('load', () => {
      let body = null;
      try { body = JSON.parse(xhr.responseText); } catch { /* not JSON */ }
      if (xhr.status >= 200 && xhr.status < 300) { resolve(body); return; }
      const e = body && body.error ? body.error : { type: 'api_error', message: `${xhr.status} ${xhr.statusText}` };
      const ended = xhr.status === 401;
      if (ended) expire('Your session has expired or was revoked. Please sign in again.');
      reject(new ApiError(xhr.status, e.type, e.message, ended));
    });
    xhr.addEventListener('error', () => reject(new ApiError(0, 'api_error', 'The upload failed: the connection was lost.')));
    xhr.addEventListener('abort', () => reject(new ApiError(0, 'api_error', 'The upload was cancelled.')));
    const form = new FormData();
    form.append('file', file, name);
    xhr.send(form);
  });
}

/**
 * stream posts body to url (or, with no body, gets url) and yields the
 * Server-Sent Events of the answer as {event, data} with data parsed from
 * JSON, as each one arrives; onOpen, when given, gets the response once
 * its headers arrived (a chat turn's id is one of them).
 */
export async function* stream(url, body, signal, onOpen) {
  const init = body == null
    ? { method: 'GET', signal, headers: { Accept: 'text/event-stream' } }
    : { method: 'POST', signal, headers: { 'Content-Type': 'application/json', Accept: 'text/event-stream' }, body: JSON.stringify(body) };
  const resp = await authFetch(url, init);
  if (!resp.ok) throw await failure(resp);
  if (onOpen) onOpen(resp);
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true }).replace(/\r\n/g, '\n');
    let cut;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const chunk = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      const ev = parseEvent(chunk);
      if (ev) yield ev;
    }
  }
  const last = parseEvent(buf);
  if (last) yield last;
}

/** parseEvent reads one SSE event block. */
export function parseEvent(chunk) {
  let event = 'message';
  const data = [];
  for (const line of chunk.split('\n')) {
    if (line.startsWith('event:')) event = line.slice(6).trim();
    else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
  }
  if (data.length === 0) return null;
  try { return { event, data: JSON.parse(data.join('\n')) }; } catch { return { event, data: data.join('\n') }; }
}

/** decodeFileID returns the sandbox path a file id names (base64url). */
export function decodeFileID(id) {
  try {
    const b64 = id.replace(/-/g, '+').replace(/_/g, '/') + '==='.slice((id.length + 3) % 4);
    const bin = atob(b64);
    return new TextDecoder().decode(Uint8Array.from(bin, (c) => c.charCodeAt(0)));
  } catch { return ''; }
}
