// notice.js: the page-wide message area (role=alert) for errors and news.

/** notify shows message in the page's notice; kind is "error" or "info". */
export function notify(message, kind = 'error') {
  const box = document.getElementById('notice');
  document.getElementById('notice-text').textContent = message;
  box.dataset.kind = kind;
  box.hidden = false;
}

/** dismiss hides the notice. */
export function dismiss() {
  document.getElementById('notice').hidden = true;
}
