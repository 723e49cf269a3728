// api.js: the client of threadbox's HTTP API: the session, JSON calls,
// uploads with progress, downloads and the chat turn's event stream.

const KEY = 'threadbox.session';
export const APP = '/api/v1/app';

/** ApiError is a failed call: HTTP status, error type and message. */
export class ApiError extends Error {
  constructor(status, type, message) {
    super(message);
    this.status = status;
    this.type = type;
  }
}

/** The names the org policy gives its switches, as users read them. */
const FEATURES = {
  'codeExecution': 'code execution',
  'uploads': 'file uploads',
  'downloads.generated': 'downloads of generated files',
  'downloads.uploaded': 'downloads of uploaded files',
};

/** featureLabel returns the readable name of a policy feature. */
export function featureLabel(name) {
  return FEATURES[name] || name;
}

/**
 * explain turns an error into the sentence shown to the user. A policy
 * refusal names the feature the org admin switched off.
 */
export function explain(err) {
  if (!(err instanceof ApiError)) return (err && err.message) || String(err);
  const m = /feature "([^"]+)" is disabled/.exec(err.message);
  if (m && (err.status === 403 || err.type === 'permission_error')) {
    return `Refused: your organization's admin has switched off ${featureLabel(m[1])} (${m[1]}).`;
  }
  return err.message;
}

let expiredHandler = () => {};
let expiryTimer = 0;

/** onSessionExpired sets what happens when the session ends by itself. */
export function onSessionExpired(fn) { expiredHandler = fn; }

/** session is the signed-in user's token, kept for the browser tab. */
export const session = {
  get() {
    try { return JSON.parse(sessionStorage.getItem(KEY) || 'null'); } catch { return null; }
  },
  save(s) {
    sessionStorage.setItem(KEY, JSON.stringify(s));
    this.watch();
  },
  clear() {
    sessionStorage.removeItem(KEY);
    clearTimeout(expiryTimer);
  },
  /** watch ends the session when its token's expiry passes. */
  watch() {
    clearTimeout(expiryTimer);
    const s = this.get();
    if (!s || !s.expires_at) return;
    const ms = new Date(s.expires_at).getTime() - Date.now();
    if (ms <= 0) { expire(); return; }
    expiryTimer = setTimeout(expire, Math.min(ms, 2 ** 31 - 1));
  },
};

function expire(message) {
  if (!session.get()) return;
  session.clear();
  expiredHandler(message || 'Your session has expired. Please sign in again.');
}

function authHeaders(extra = {}) {
  const s = session.get();
  return s ? { Authorization: 'Bearer ' + s.token, ...extra } : extra;
}

async function failure(resp) {
  let type = 'api_error';
  let message = `${resp.status} ${resp.statusText}`;
  try {
    const body = await resp.json();
    if (body && body.error) { type = body.error.type; message = body.error.message; }
  } catch { /* not JSON */ }
  if (resp.status === 401 && session.get()) {
    expire('Your session has expired or was revoked. Please sign in again.');
  }
  return new ApiError(resp.status, type, message);
}

/** api calls a JSON endpoint; path is absolute or relative to /api/v1/app. */
export async function api(method, path, body) {
  const url = path.startsWith('/api/') ? path : APP + path;
  const init = { method, headers: authHeaders() };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(url, init);
  if (!resp.ok) throw await failure(resp);
  if (resp.status === 204) return null;
  return resp.json();
}

/** login exchanges a password for a session token and saves it. */
export async function login(email, password) {
  const resp = await fetch(APP + '/auth/login', {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ email, password }),
  });
  if (!resp.ok) throw await failure(resp);
  const s = await resp.json();
  session.save({ ...s, email });
  return s;
}

/** logout revokes the session token (best effort) and forgets it. */
export async function logout() {
  const s = session.get();
  if (s && s.id) {
    try { await fetch(APP + '/tokens/' + encodeURIComponent(s.id), { method: 'DELETE', headers: authHeaders() }); } catch { /* offline */ }
  }
  session.clear();
}

/** fetchBlob downloads url with the session's token. */
export async function fetchBlob(url) {
  const resp = await fetch(url, { headers: authHeaders() });
  if (!resp.ok) throw await failure(resp);
  return resp.blob();
}

/** fetchText downloads url as text with the session's token. */
export async function fetchText(url) {
  const resp = await fetch(url, { headers: authHeaders() });
  if (!resp.ok) throw await failure(resp);
  return resp.text();
}

/**
 * upload posts file as multipart field "file" to url, calling
 * onProgress(loaded, total) as bytes leave; resolves to the JSON answer.
 */
export function upload(url, file, onProgress) {
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
      if (xhr.status === 401 && session.get()) expire('Your session has expired or was revoked. Please sign in again.');
      reject(new ApiError(xhr.status, e.type, e.message));
    });
    xhr.addEventListener('error', () => reject(new ApiError(0, 'api_error', 'The upload failed: the connection was lost.')));
    xhr.addEventListener('abort', () => reject(new ApiError(0, 'api_error', 'The upload was cancelled.')));
    const form = new FormData();
    form.append('file', file, file.name);
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
    ? { method: 'GET', signal, headers: authHeaders({ Accept: 'text/event-stream' }) }
    : { method: 'POST', signal, headers: authHeaders({ 'Content-Type': 'application/json', Accept: 'text/event-stream' }), body: JSON.stringify(body) };
  const resp = await fetch(url, init);
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
