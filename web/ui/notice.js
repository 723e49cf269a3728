// notice.js: the page-wide message area (role=alert) for errors and news.

/**
 * notify shows message in the page's notice; kind is "error" or "info".
 * An empty message shows nothing: explain gives one for a call refused
 * because the session ended, which the sign-in form reports instead.
 */
export function notify(message, kind = 'error') {
  if (!message) return;
  const box = document.getElementById('notice');
  document.getElementById('notice-text').textContent = message;
  box.dataset.kind = kind;
  box.hidden = false;
}

/** dismiss hides the notice. */
export function dismiss() {
  document.getElementById('notice').hidden = true;
}
