// theme.js: the colour theme, applied before the page is drawn (a classic
// script in the head, so a dark page never flashes light). The user's
// choice ("light", "dark", or none for the system's setting) is kept in
// localStorage under "threadbox-theme"; the root element gets
// data-theme="light" or "dark" (what styles.css reads) and
// data-theme-choice. The page's theme menu (app.js) changes the choice and
// sends the "threadbox:theme" event; other tabs follow through the
// storage event, and "system" follows the system's setting as it changes.
(function () {
  var KEY = 'threadbox-theme';
  var dark = window.matchMedia('(prefers-color-scheme: dark)');
  function choice() {
    var c = null;
    try { c = window.localStorage.getItem(KEY); } catch (e) { /* storage off */ }
    return c === 'light' || c === 'dark' ? c : 'system';
  }
  function apply() {
    var c = choice();
    var root = document.documentElement;
    root.setAttribute('data-theme-choice', c);
    root.setAttribute('data-theme', c === 'system' ? (dark.matches ? 'dark' : 'light') : c);
  }
  apply();
  dark.addEventListener('change', apply);
  window.addEventListener('storage', function (e) { if (e.key === KEY || e.key === null) apply(); });
  document.addEventListener('threadbox:theme', apply);
})();
